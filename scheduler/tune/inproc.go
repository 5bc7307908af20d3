package tune

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Trainable is a single-worker training function run inside the tuner's
// process by the InProcess backend (Ray's function trainable).
type Trainable func(ctx context.Context, t *Trial) error

// InProcess is a backend that runs each trial as a goroutine of the tuner's
// process, for trainables that fit in one worker. A trial writes the same
// progress.jsonl and checkpoints (through trainer/storage) as a process
// trial, but costs no process start-up or rendezvous, and each Report waits
// until the tuner has decided, so a stopped trial does not run one more
// iteration.
//
// It is a Preparer: while every slot is busy it opens the storage of the
// next trial in the background (directory flushes and the writer lock), so
// a freed slot starts the trial without waiting for the disk.
type InProcess struct {
	Fn Trainable
	// Fsync is the durability of plain metric records (checkpoint records
	// are always flushed); FsyncEveryRecord by default.
	Fsync storage.FsyncPolicy

	mu       sync.Mutex                 // guards prepared
	prepared map[string]chan openResult // trial -> its storage, being opened
}

type openResult struct {
	st  *storage.Run
	err error
}

func (b *InProcess) open(spec TrialSpec) (*storage.Run, error) {
	policy := storage.Policy{NumToKeep: spec.Checkpoint.NumToKeep, ScoreAttribute: spec.Checkpoint.ScoreAttribute,
		ScoreOrder: spec.Checkpoint.ScoreOrder, Fsync: b.Fsync}
	st, err := storage.Open(spec.StoragePath, spec.ID, policy)
	if err != nil {
		return nil, fmt.Errorf("open trial storage: %w", err)
	}
	return st, nil
}

// InProcessReports is true: every report reaches the tuner through
// TrialSpec.Reported.
func (b *InProcess) InProcessReports() bool { return true }

// Prepare opens the trial's storage in the background.
func (b *InProcess) Prepare(spec TrialSpec) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.prepared == nil {
		b.prepared = map[string]chan openResult{}
	}
	if _, ok := b.prepared[spec.ID]; ok {
		return
	}
	ch := make(chan openResult, 1)
	b.prepared[spec.ID] = ch
	go func() {
		st, err := b.open(spec)
		ch <- openResult{st, err}
	}()
}

// Release closes the storage of every prepared trial that did not run.
func (b *InProcess) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, ch := range b.prepared {
		if r := <-ch; r.st != nil {
			r.st.Close()
		}
		delete(b.prepared, id)
	}
}

// take returns the trial's prepared storage, or opens it.
func (b *InProcess) take(spec TrialSpec) (*storage.Run, error) {
	b.mu.Lock()
	ch, ok := b.prepared[spec.ID]
	delete(b.prepared, spec.ID)
	b.mu.Unlock()
	if ok {
		if r := <-ch; r.err == nil {
			return r.st, nil
		}
	}
	return b.open(spec)
}

// Trial is a running trial's view for a Trainable.
type Trial struct {
	id       string
	config   json.RawMessage
	run      *storage.Run
	step     int64
	latest   string
	reported func(ctx context.Context) error
	// began is when the trainable was called, trainedBefore what the
	// checkpoint it resumed from had trained (Record.TimeTotal).
	began         time.Time
	trainedBefore time.Duration
}

// ID is the trial's name ("trial_0003").
func (t *Trial) ID() string { return t.id }

// Config is the trial's config as JSON.
func (t *Trial) Config() json.RawMessage { return t.config }

// DecodeConfig decodes the config into v, rejecting unknown keys.
func (t *Trial) DecodeConfig(v any) error {
	dec := json.NewDecoder(bytes.NewReader(t.config))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode trial config: %w", err)
	}
	return nil
}

// Checkpoint is the directory of the latest committed checkpoint of the
// trial (its own or one cloned by PBT), or "" when there is none.
func (t *Trial) Checkpoint() string { return t.latest }

// Iteration is the step of the latest report: the number of reports so
// far, across restarts. A restarted trial resumes at the step of its latest
// checkpoint; reports made after that checkpoint are rolled back.
func (t *Trial) Iteration() int64 { return t.step }

// NewCheckpointDir returns an empty directory on the trial's storage to
// build a checkpoint in.
func (t *Trial) NewCheckpointDir() (string, error) {
	d, err := os.MkdirTemp(t.run.Dir(), ".tmp-ckpt-") // storage.Open removes .tmp-* leftovers
	if err != nil {
		return "", fmt.Errorf("make checkpoint dir: %w", err)
	}
	return d, nil
}

// Report records metrics and, when dir is not empty, commits the files of
// dir as a checkpoint; then it waits for the tuner's decision. It returns
// an error when the trial must stop.
func (t *Trial) Report(ctx context.Context, metrics trainer.Metrics, dir string) error {
	t.step++
	now := time.Now()
	rec := storage.Record{Step: t.step, Time: now, Metrics: metrics, TimeTotal: t.trainedBefore + now.Sub(t.began)}
	if dir == "" {
		if err := t.run.Append(rec); err != nil {
			return fmt.Errorf("report step %d: %w", t.step, err)
		}
	} else {
		staged, err := t.run.Stage()
		if err != nil {
			return fmt.Errorf("report step %d: %w", t.step, err)
		}
		if err := staged.AddDir(dir); err != nil {
			staged.Abort()
			return fmt.Errorf("report step %d: %w", t.step, err)
		}
		os.Remove(dir)
		name, err := t.run.Commit(staged, rec)
		if err != nil {
			return fmt.Errorf("report step %d: %w", t.step, err)
		}
		t.latest = t.run.CheckpointPath(name)
	}
	if t.reported != nil {
		return t.reported(ctx)
	}
	return ctx.Err()
}

// Run runs the trainable until it returns or ctx ends.
func (b *InProcess) Run(ctx context.Context, spec TrialSpec) error {
	st, err := b.take(spec)
	if err != nil {
		return err
	}
	defer st.Close()
	t := &Trial{id: spec.ID, config: spec.Config, run: st, reported: spec.Reported}
	// Like a worker of the trainer runtime, restart from the latest
	// checkpoint and roll back the reports made after it.
	name, path, ok, err := st.Latest()
	if err != nil {
		return fmt.Errorf("find latest checkpoint: %w", err)
	}
	if ok {
		t.latest = path
		recs, err := st.Records()
		if err != nil {
			return fmt.Errorf("read trial progress: %w", err)
		}
		for _, r := range recs {
			if r.Checkpoint == name {
				t.step, t.trainedBefore = r.Step, r.TimeTotal
			}
		}
	}
	if err := st.TruncateAfter(t.step); err != nil {
		return fmt.Errorf("roll back trial progress: %w", err)
	}
	t.began = time.Now()
	if err := b.Fn(ctx, t); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", errStopped, ctx.Err())
		}
		return err
	}
	return nil
}
