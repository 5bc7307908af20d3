package tune

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// sampleState is a state as the tuner writes it: trials in every status,
// sampled params, results and a PBT exploit.
func sampleState() *ExperimentState {
	return &ExperimentState{Version: stateVersion, Name: "exp", Elapsed: 90 * time.Second, Trials: []*TrialState{
		{ID: "trial_0000", Config: map[string]any{"lr": 0.01, "epochs": 9, "layers": []any{16, 8}},
			Params: map[string]any{"lr": 0.01}, Status: StatusTerminated, Iterations: 9,
			LastResult: map[string]any{"loss": 0.25, "training_iteration": 9.0}}, // results stay float64
		{ID: "trial_0001", Config: map[string]any{"lr": 0.1, "opt": map[string]any{"name": "sgd"}},
			Status: StatusError, Failures: 3, FailuresForgiven: 1, Reason: "failure budget exhausted"},
		{ID: "trial_0002", Config: map[string]any{"lr": 0.001}, Status: StatusStopped, Reason: "asha cutoff",
			Exploits: []ExploitRecord{{Donor: "trial_0000", Time: 4}}},
		{ID: "trial_0003", Config: map[string]any{}, Status: StatusPending},
		{ID: "trial_0004", Config: map[string]any{"lr": 1e-5}, Status: StatusRunning, Iterations: 2},
	}}
}

// A state the tuner wrote reads back as it was.
func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	b, err := sampleState().encode()
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(dir, StateFile), b, 0o644))
	st, ok, err := LoadState(context.Background(), dir)
	must.NoError(t, err)
	must.True(t, ok)
	must.False(t, st.Written.IsZero())
	st.Written = time.Time{}
	must.Eq(t, sampleState(), st)
}

// A state the tuner cannot resume from safely is an error, not a panic or
// a trial directory outside the experiment.
func TestLoadStateRejectsBadTrials(t *testing.T) {
	cases := []struct {
		name, state, err string
	}{
		{"null trial", `{"trials":[null]}`, "trial 0 is null"},
		{"no ID", `{"trials":[{"status":"PENDING"}]}`, `ID "" is not`},
		{"ID outside the experiment", `{"trials":[{"id":"../x","status":"PENDING"}]}`, `ID "../x" is not`},
		{"ID of the experiment itself", `{"trials":[{"id":".","status":"PENDING"}]}`, `ID "." is not`},
		{"ID with a directory", `{"trials":[{"id":"a/b","status":"PENDING"}]}`, `ID "a/b" is not`},
		{"absolute ID", `{"trials":[{"id":"/tmp","status":"PENDING"}]}`, `ID "/tmp" is not`},
		{"ID twice", `{"trials":[{"id":"a","status":"PENDING"},{"id":"a","status":"ERROR"}]}`, "appears twice"},
		{"unknown status", `{"trials":[{"id":"a","status":"DONE"}]}`, `unknown status "DONE"`},
		{"negative count", `{"trials":[{"id":"a","status":"ERROR","failures":-1}]}`, "negative count"},
		{"newer version", `{"version":2,"trials":[]}`, "version 2 is newer"},
		{"negative elapsed", `{"version":1,"elapsed_ns":-5}`, "negative elapsed"},
		{"not JSON", `{"trials":`, "unexpected end"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			must.NoError(t, os.WriteFile(filepath.Join(dir, StateFile), []byte(c.state), 0o644))
			_, _, err := LoadState(context.Background(), dir)
			must.ErrorContains(t, err, c.err)
			must.StrContains(t, err.Error(), "decode experiment state")
		})
	}
}

// FuzzDecodeState: no experiment state file makes the decoder panic, and
// a state it accepts has trials the tuner can resume (unique IDs, each one
// directory inside the experiment), reads back after the tuner writes it
// again and is then written the same, and renders as a trial table.
func FuzzDecodeState(f *testing.F) {
	b, err := sampleState().encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"version":1,"name":"e","elapsed_ns":0,"trials":[{"id":"trial_0000","config":null,"status":"PENDING","iterations":0}]}`))
	f.Add([]byte(`{"trials":[null]}`))
	f.Add([]byte(`{"trials":[{"id":"..","status":"RUNNING","config":{"a":[1,2.5,{"b":1e300}]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeState(data)
		if err != nil {
			return
		}
		ids := map[string]bool{}
		for _, ts := range st.Trials {
			if ids[ts.ID] || filepath.Dir(filepath.Join("exp", ts.ID)) != "exp" {
				t.Fatalf("trial ID %q: not one directory inside the experiment, or twice", ts.ID)
			}
			ids[ts.ID] = true
		}
		again, err := st.encode()
		if err != nil {
			t.Fatalf("encode an accepted state: %v", err)
		}
		st2, err := decodeState(again)
		if err != nil {
			t.Fatalf("the state written again does not read back: %v\n%s", err, again)
		}
		third, err := st2.encode()
		if err != nil || !bytes.Equal(again, third) {
			t.Fatalf("the state changed when written again (%v):\n%s\n%s", err, again, third)
		}
		var table bytes.Buffer
		WriteTable(&table, st, "loss")
		if !strings.HasPrefix(table.String(), "== ") {
			t.Fatalf("trial table: %q", table.String())
		}
	})
}

// An experiment whose trials are on an object store says so in its state,
// and TrialRuns finds them there, with the store's options; otherwise
// they are in the experiment directory.
func TestTrialRuns(t *testing.T) {
	dir := t.TempDir()
	st := sampleState()
	root, opts := st.TrialRuns(dir)
	must.EqOp(t, dir, root)
	must.SliceEmpty(t, opts)

	st.TrialStorage = "s3://bucket/runs/exp"
	st.TrialStorageOptions = &workerenv.StorageOptions{Endpoint: "http://127.0.0.1:9000", PathStyle: true}
	b, err := st.encode()
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(dir, StateFile), b, 0o644))
	back, ok, err := LoadState(context.Background(), dir)
	must.NoError(t, err)
	must.True(t, ok)
	back.Written = time.Time{}
	must.Eq(t, st, back)
	root, opts = back.TrialRuns(dir)
	must.EqOp(t, "s3://bucket/runs/exp", root)
	must.SliceLen(t, 1, opts)
}

// The state on storage follows a running trial's reports (its iterations
// and time trained), within a progress tick, so that `status` and the
// dashboard show how far it is, not 0 until it ends.
func TestStateFollowsRunningTrials(t *testing.T) {
	dir := t.TempDir()
	release := make(chan struct{})
	fn := func(ctx context.Context, tr *Trial) error {
		for range 5 {
			time.Sleep(5 * time.Millisecond)
			if err := tr.Report(ctx, trainer.Metrics{"loss": 1.0}, ""); err != nil {
				return err
			}
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := New(&InProcess{Fn: fn}, map[string]any{}, Config{Name: "live", StoragePath: dir,
			ProgressInterval: 20 * time.Millisecond}).Fit(context.Background())
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, ok, err := LoadState(context.Background(), filepath.Join(dir, "live"))
		must.NoError(t, err)
		if ok && st.Trials[0].Status == StatusRunning && st.Trials[0].Iterations == 5 {
			must.Positive(t, st.Trials[0].TimeTotal)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the saved state never showed the running trial's 5 reports: %+v", st.Trials[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	must.NoError(t, <-done)
}
