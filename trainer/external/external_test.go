package external

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

func TestDecodeRequest(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{`{"op":"report","metrics":{"loss":0.5},"checkpoint":"/d"}`, true},
		{`{"op":"checkpoint_dir"}`, true},
		{`{"metrics":{}}`, false},
		{`{"op":"report","extra":1}`, false},
		{`not json`, false},
	} {
		t.Run(tc.line, func(t *testing.T) {
			req, err := DecodeRequest([]byte(tc.line))
			if !tc.ok {
				must.Error(t, err)
				return
			}
			must.NoError(t, err)
			must.NotEq(t, "", req.Op)
		})
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"op":"report","metrics":{"a":1}}`))
	f.Add([]byte(`{"op":"checkpoint_dir"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeRequest(b)
		if err == nil && req.Op == "" {
			t.Fatal("accepted a request without op")
		}
	})
}

// The command gets the variables its launcher held back from the wrapper
// (the job's LD_PRELOAD, ...), not the holder itself, and the torchrun
// variables win over anything else.
func TestCommandEnv(t *testing.T) {
	cases := []struct {
		name    string
		environ []string
		want    []string
		err     string
	}{
		{"nothing held", []string{"A=1"}, []string{"A=1", "RANK=0"}, ""},
		{"held variables reach the command", []string{"A=1", HeldEnv + `={"LD_PRELOAD":"/x.so","GODEBUG":"a=1"}`},
			[]string{"A=1", "GODEBUG=a=1", "LD_PRELOAD=/x.so", "RANK=0"}, ""},
		{"garbage", []string{HeldEnv + "=[1]"}, nil, HeldEnv},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := commandEnv(tc.environ, "RANK=0")
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		})
	}
	must.SliceContainsSubset(t, workerenv.TorchEnvNames(), []string{"RANK", "MASTER_ADDR", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID"})
}
