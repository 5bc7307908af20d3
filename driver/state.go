package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
)

// stateVersion is TaskHandle.version for the driver_state below. Nomad
// reserves 0 for handles from before plugins existed.
const stateVersion = 1

// taskState is what the driver persists in TaskHandle.driver_state: all it
// needs to reattach after the plugin (or the agent) restarts. Nomad keeps it
// opaque; it is JSON so an operator can read it from the client state.
type taskState struct {
	// TaskConfig is the TaskConfig proto as StartTask got it. The handle's
	// own config does not keep the raw driver config across agent restarts.
	TaskConfig []byte `json:"task_config"`
	// Config is the decoded task config {} block.
	Config TaskConfig `json:"config"`
	// Process is the Runner's state for Recover.
	Process json.RawMessage `json:"process"`
	// StartedAt is when the task process started.
	StartedAt time.Time `json:"started_at"`
	// EventsPath is the file the runtime appends events to.
	EventsPath string `json:"events_path"`
}

func encodeState(tc *drivers.TaskConfig, cfg TaskConfig, proc json.RawMessage, startedAt time.Time, eventsPath string) ([]byte, error) {
	raw, err := proto.Marshal(tc)
	if err != nil {
		return nil, fmt.Errorf("encode task config: %w", err)
	}
	b, err := json.Marshal(taskState{TaskConfig: raw, Config: cfg, Process: proc, StartedAt: startedAt, EventsPath: eventsPath})
	if err != nil {
		return nil, fmt.Errorf("encode driver state: %w", err)
	}
	return b, nil
}

// decodeState reads driver_state back; tc is the TaskConfig it carried.
func decodeState(h *drivers.TaskHandle) (taskState, *drivers.TaskConfig, error) {
	var st taskState
	if h.GetVersion() != stateVersion {
		return st, nil, fmt.Errorf("driver state version %d is not %d", h.GetVersion(), stateVersion)
	}
	if len(h.GetDriverState()) == 0 {
		return st, nil, errors.New("driver state is empty")
	}
	if err := json.Unmarshal(h.GetDriverState(), &st); err != nil {
		return st, nil, fmt.Errorf("decode driver state: %w", err)
	}
	var tc drivers.TaskConfig
	if err := proto.Unmarshal(st.TaskConfig, &tc); err != nil {
		return st, nil, fmt.Errorf("decode task config in driver state: %w", err)
	}
	if len(st.Process) == 0 || string(st.Process) == "null" {
		return st, nil, errors.New("driver state has no process state")
	}
	return st, &tc, nil
}
