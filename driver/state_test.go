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
