package trainspec

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestRendezvousRejoinTimeout(t *testing.T) {
	src := func(block string) string {
		return "train \"r\" {\n  entrypoint { builtin = \"quickstart\" }\n  rendezvous {\n    " + block + "\n  }\n}\n"
	}
	cases := []struct {
		name  string
		block string
		want  time.Duration
		diags []string
	}{
		{name: "unset leaves the runtime's default", block: `timeout = "1m"`},
		{name: "set", block: `rejoin_timeout = "15s"`, want: 15 * time.Second},
		{name: "not a duration", block: `rejoin_timeout = "soon"`, diags: []string{
			"train.hcl:4:22-4:28: error: Invalid duration; rejoin_timeout must be a duration such as \"30s\" or \"5m\"; \"soon\" is not one.",
		}},
		{name: "not positive", block: `rejoin_timeout = "0s"`, diags: []string{
			"train.hcl:4:22-4:26: error: Invalid duration; rejoin_timeout must be positive; got \"0s\".",
		}},
		{name: "not a string", block: `rejoin_timeout = ["20s"]`, diags: []string{
			"train.hcl:4:22-4:29: error: Incorrect attribute value type; Inappropriate value for attribute \"rejoin_timeout\": string required, but have tuple.",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec, diags := Parse([]byte(src(c.block)), "train.hcl", ParseOptions{})
			if c.diags != nil {
				must.Nil(t, spec)
				must.Eq(t, c.diags, diagLines(diags))
				return
			}
			must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
			must.Eq(t, c.want, spec.Rendezvous.RejoinTimeout)
		})
	}
}

// The spec's hash, which every compiled job carries, does not change for
// the specs that do not set rejoin_timeout; and the compiled job says that
// Nomad does not use it.
func TestRejoinTimeoutCompile(t *testing.T) {
	plain := mustParse(t, minimal, ParseOptions{})
	must.StrNotContains(t, string(mustJSON(t, plain)), "RejoinTimeout")
	_, diags := Compile(plain)
	for _, d := range diags {
		must.StrNotContains(t, d.Summary, "rejoin_timeout")
	}

	set := mustParse(t, "train \"r\" {\n  entrypoint { builtin = \"quickstart\" }\n  rendezvous { rejoin_timeout = \"15s\" }\n}\n", ParseOptions{})
	_, diags = Compile(set)
	var summaries []string
	for _, d := range diags {
		summaries = append(summaries, d.Summary)
	}
	must.SliceContains(t, summaries, "rejoin_timeout applies to local runs only")
}

func mustJSON(t *testing.T, s *Spec) []byte {
	t.Helper()
	b, err := json.Marshal(s)
	must.NoError(t, err)
	return b
}
