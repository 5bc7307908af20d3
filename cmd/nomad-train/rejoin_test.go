package main

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/console"
	"github.com/nomad-train/nomad-train/trainspec"
)

// rendezvous { rejoin_timeout } reaches the local launcher; unset, the
// launcher keeps its own default.
func TestLocalRunTakesRejoinTimeout(t *testing.T) {
	cases := []struct {
		name, block string
		want        time.Duration
	}{
		{"set", `rendezvous { rejoin_timeout = "7s" }`, 7 * time.Second},
		{"unset", ``, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := "train \"r\" {\n  entrypoint { builtin = \"quickstart\" }\n  " + c.block + "\n}\n"
			spec, diags := trainspec.Parse([]byte(src), "train.hcl", trainspec.ParseOptions{})
			must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
			must.Eq(t, c.want, console.LocalOptions(spec).RejoinTimeout)
		})
	}
}
