package driver

import (
	"fmt"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"
)

// toCty converts plain Go values for hand-made (non-Nomad) encodings.
func toCty(v any) cty.Value {
	switch x := v.(type) {
	case nil:
		return cty.NullVal(cty.DynamicPseudoType)
	case string:
		return cty.StringVal(x)
	case int:
		return cty.NumberIntVal(int64(x))
	case float64:
		return cty.NumberFloatVal(x)
	case bool:
		return cty.BoolVal(x)
	case []any:
		var vs []cty.Value
		for _, e := range x {
			vs = append(vs, toCty(e))
		}
		return cty.TupleVal(vs)
	case map[string]any:
		m := map[string]cty.Value{}
		for k, e := range x {
			m[k] = toCty(e)
		}
		return cty.ObjectVal(m)
	default:
		panic(fmt.Sprintf("toCty: %T", v))
	}
}

// mustEncodeTaskConfig encodes m as msgpack without the client's schema
// check, to reach the plugin's own validation.
func mustEncodeTaskConfig(t *testing.T, m map[string]any) []byte {
	t.Helper()
	v := toCty(m)
	b, err := ctymsgpack.Marshal(v, v.Type())
	must.NoError(t, err)
	return b
}

func TestDecodeTaskConfig(t *testing.T) {
	full := func(over map[string]any) map[string]any {
		m := map[string]any{"command": "/bin/true", "run_name": "r", "world_size": 4, "storage_path": "/data"}
		for k, v := range over {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	t.Run("defaults", func(t *testing.T) {
		tc, err := DecodeTaskConfig(mustEncodeTaskConfig(t, full(nil)))
		must.NoError(t, err)
		must.Eq(t, TaskConfig{
			Command: "/bin/true", Launcher: LauncherAuto, RunName: "r", WorldSize: 4, StoragePath: "/data", TrainConfig: "{}", Port: "train",
			Rendezvous: RendezvousConfig{Backend: "consul", Timeout: 5 * time.Minute},
		}, tc)
	})
	t.Run("everything", func(t *testing.T) {
		tc, err := DecodeTaskConfig(mustEncodeTaskConfig(t, full(map[string]any{"launcher": "direct"})))
		must.NoError(t, err)
		must.Eq(t, LauncherDirect, tc.Launcher)
		tc, err = DecodeTaskConfig(mustEncodeTaskConfig(t, full(map[string]any{
			"command": nil, "builtin": "quickstart", "world_size": "4", "train_config": `{"lr":0.001}`, "port": "coll",
			"rendezvous": map[string]any{"backend": "embedded", "address": "127.0.0.1:7000", "timeout": "30s"},
			"checkpoint": map[string]any{"num_to_keep": 2, "score_attribute": "loss", "score_order": "min", "async_upload": false, "staging": "memory",
				"resume_from": "s3://b/p/qs/checkpoints/checkpoint_000019"},
			"failure": map[string]any{"max_failures": -1},
		})))
		must.NoError(t, err)
		must.Eq(t, TaskConfig{
			Builtin: "quickstart", Launcher: LauncherAuto, RunName: "r", WorldSize: 4, StoragePath: "/data", TrainConfig: `{"lr":0.001}`, Port: "coll",
			Rendezvous: RendezvousConfig{Backend: "embedded", Address: "embedded://127.0.0.1:7000", Timeout: 30 * time.Second},
			Checkpoint: CheckpointConfig{NumToKeep: 2, ScoreAttribute: "loss", ScoreOrder: "min", AsyncUpload: new(false), Staging: "memory",
				ResumeFrom: "s3://b/p/qs/checkpoints/checkpoint_000019"},
			Failure: FailureConfig{MaxFailures: -1},
		}, tc)
	})
	bad := []struct {
		name  string
		over  map[string]any
		field string
	}{
		{"no entrypoint", map[string]any{"command": nil}, "command"},
		{"both entrypoints", map[string]any{"builtin": "x"}, "command"},
		{"missing run_name", map[string]any{"run_name": nil}, "run_name"},
		{"run_name with slash", map[string]any{"run_name": "a/b"}, "run_name"},
		{"world_size string", map[string]any{"world_size": "many"}, "world_size"},
		{"world_size fraction", map[string]any{"world_size": 1.5}, "world_size"},
		{"world_size zero", map[string]any{"world_size": 0}, "world_size"},
		{"world_size bool", map[string]any{"world_size": true}, "world_size"},
		{"args not a list", map[string]any{"args": "x"}, "args"},
		{"args element", map[string]any{"args": []any{"a", []any{"b"}}}, "args[1]"},
		{"bad json", map[string]any{"train_config": "{"}, "train_config"},
		{"missing storage", map[string]any{"storage_path": nil}, "storage_path"},
		{"unknown", map[string]any{"gpus": 1}, "gpus"},
		{"bad backend", map[string]any{"rendezvous": map[string]any{"backend": "etcd"}}, "rendezvous.backend"},
		{"embedded without address", map[string]any{"rendezvous": map[string]any{"backend": "embedded"}}, "rendezvous.address"},
		{"bad timeout", map[string]any{"rendezvous": map[string]any{"timeout": "soon"}}, "rendezvous.timeout"},
		{"unknown in block", map[string]any{"rendezvous": map[string]any{"ttl": "1s"}}, "rendezvous.ttl"},
		{"negative keep", map[string]any{"checkpoint": map[string]any{"num_to_keep": -1}}, "checkpoint.num_to_keep"},
		{"score order", map[string]any{"checkpoint": map[string]any{"score_order": "up"}}, "checkpoint.score_order"},
		{"staging", map[string]any{"checkpoint": map[string]any{"staging": "ram"}}, "checkpoint.staging"},
		{"max failures", map[string]any{"failure": map[string]any{"max_failures": -2}}, "failure.max_failures"},
		{"unknown launcher", map[string]any{"launcher": "torchrun"}, "launcher"},
		{"launcher for a builtin", map[string]any{"command": nil, "builtin": "quickstart", "launcher": "external"}, "launcher"},
		{"block is a list", map[string]any{"failure": []any{map[string]any{"max_failures": 1}}}, "failure"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeTaskConfig(mustEncodeTaskConfig(t, full(tc.over)))
			var ce *ConfigError
			must.ErrorAs[*ConfigError](t, err, &ce)
			must.Eq(t, tc.field, ce.Field, must.Sprint(err))
			must.StrContains(t, err.Error(), fmt.Sprintf("%q", tc.field))
		})
	}
	t.Run("malformed bytes", func(t *testing.T) {
		_, err := DecodeTaskConfig([]byte{0x85, 0xa1})
		must.ErrorContains(t, err, "malformed msgpack")
	})
}

func TestDecodePluginConfig(t *testing.T) {
	c, err := DecodePluginConfig(nil)
	must.NoError(t, err)
	must.Eq(t, DefaultPluginConfig(), c)

	b := mustEncodeTaskConfig(t, map[string]any{
		"consul_address": "127.0.0.1:8500", "consul_token": "tok", "allowed_command_dirs": []any{"/opt/bin/"},
		"default_user": "nobody", "gpu_stats": false, "stats_interval": "5s", "allow_unauthenticated": true,
	})
	c, err = DecodePluginConfig(b)
	must.NoError(t, err)
	must.Eq(t, PluginConfig{ConsulAddress: "127.0.0.1:8500", ConsulToken: "tok", AllowedCommandDirs: []string{"/opt/bin"}, DefaultUser: "nobody", DeniedUsers: []string{"root"}, StatsInterval: 5 * time.Second, AllowUnauthenticated: true}, c)

	_, err = DecodePluginConfig(mustEncodeTaskConfig(t, map[string]any{"allowed_command_dirs": []any{"rel"}}))
	must.ErrorContains(t, err, "allowed_command_dirs[0]")
}

func FuzzDecodeTaskConfig(f *testing.F) {
	seeds := []map[string]any{
		{"command": "/bin/true", "run_name": "r", "world_size": 4, "storage_path": "/data"},
		{"builtin": "quickstart", "run_name": "r", "world_size": "0.001", "storage_path": "/d", "rendezvous": map[string]any{"backend": "embedded", "address": "h:1"}},
		{"command": "x", "args": []any{"a", 1, true}, "checkpoint": map[string]any{"num_to_keep": 1e20}},
		{"command": "python3", "args": []any{"train.py"}, "launcher": "external", "run_name": "r", "world_size": 2, "storage_path": "/d"},
		{"builtin": "quickstart", "launcher": "direct", "run_name": "r", "world_size": 1, "storage_path": "/d"},
		{"builtin": "quickstart", "run_name": "r", "world_size": 2, "storage_path": "s3://b/p",
			"storage": map[string]any{"endpoint": "http://127.0.0.1:9000", "region": "eu-west-1", "path_style": true}},
	}
	for _, s := range seeds {
		v := toCty(s)
		b, err := ctymsgpack.Marshal(v, v.Type())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tc, err := DecodeTaskConfig(b)
		if err != nil {
			return
		}
		// What decodes must satisfy the contract.
		if tc.WorldSize < 1 || tc.RunName == "" || tc.StoragePath == "" || (tc.Builtin == "") == (tc.Command == "") {
			t.Fatalf("accepted an invalid config: %+v", tc)
		}
		if tc.Launcher != LauncherAuto && (tc.Builtin != "" || tc.Launcher != LauncherExternal && tc.Launcher != LauncherDirect) {
			t.Fatalf("accepted launcher %q", tc.Launcher)
		}
		if tc.Rendezvous.Backend != BackendConsul && tc.Rendezvous.Backend != BackendEmbedded {
			t.Fatalf("accepted backend %q", tc.Rendezvous.Backend)
		}
	})
}
