package driver

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
)

func TestDriverStateRoundTripAndRejects(t *testing.T) {
	tc := &drivers.TaskConfig{Id: "a/t/1", Name: "t", AllocDir: "/x", MsgpackDriverConfig: []byte{0x80}}
	cfg := TaskConfig{Command: "/bin/true", RunName: "r", WorldSize: 2, Rendezvous: RendezvousConfig{Backend: "consul", Timeout: time.Minute}}
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	b, err := encodeState(tc, cfg, json.RawMessage(`{"PID":12}`), at, "/x/t/local/e")
	must.NoError(t, err)

	st, gotTC, err := decodeState(&drivers.TaskHandle{Version: stateVersion, DriverState: b})
	must.NoError(t, err)
	must.Eq(t, cfg, st.Config)
	must.Eq(t, at, st.StartedAt)
	must.Eq(t, "/x/t/local/e", st.EventsPath)
	must.Eq(t, `{"PID":12}`, string(st.Process))
	must.Eq(t, tc.GetId(), gotTC.GetId())
	must.Eq(t, tc.GetMsgpackDriverConfig(), gotTC.GetMsgpackDriverConfig())

	noProc, err := encodeState(tc, cfg, nil, at, "")
	must.NoError(t, err)
	for name, h := range map[string]*drivers.TaskHandle{
		"pre-0.9 version": {Version: 0, DriverState: b},
		"empty":           {Version: stateVersion},
		"not json":        {Version: stateVersion, DriverState: []byte("{")},
		"no process":      {Version: stateVersion, DriverState: noProc},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := decodeState(h)
			must.Error(t, err)
		})
	}
}

// FuzzDecodeState: RecoverTask hands decodeState whatever driver_state the
// agent kept. Any bytes must give an error or a state with a task config
// and a process state, never a panic.
func FuzzDecodeState(f *testing.F) {
	tc := &drivers.TaskConfig{Id: "a/t/1", Name: "t", AllocDir: "/x", MsgpackDriverConfig: []byte{0x80}}
	cfg := TaskConfig{Command: "/bin/true", RunName: "r", WorldSize: 2, Rendezvous: RendezvousConfig{Backend: "consul", Timeout: time.Minute}}
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, proc := range []string{`{"PID":12,"ShimPID":11,"StateDir":"/x/t/private/train-a"}`, `null`, `{}`} {
		b, err := encodeState(tc, cfg, json.RawMessage(proc), at, "/x/t/local/events.jsonl")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"task_config":"!!","process":1}`))
	f.Add([]byte(`{"task_config":"CgVhL3QvMQ==","process":{},"config":{"WorldSize":-1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, tc, err := decodeState(&drivers.TaskHandle{Version: stateVersion, DriverState: b})
		if err != nil {
			return
		}
		if tc == nil || len(st.Process) == 0 || string(st.Process) == "null" {
			t.Fatalf("accepted a state without task config or process: %+v", st)
		}
		if !json.Valid(st.Process) {
			t.Fatalf("accepted process state that is not JSON: %q", st.Process)
		}
	})
}
