package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/collective"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Session is one worker's view of the run, handed to the training function
// (Ray's train context). Its methods that talk to peers are collective: every
// rank calls them, in the same order.
type Session struct {
	// Immutable after setup.
	rank, size           int
	localRank, localSize int
	nodeRank             int
	generation           uint64
	attempt              string // storage.AttemptID of the run's secret: with generation, names rank 0 as the storage writer
	recordAttempt        int    // rank 0: the Attempt of the records it writes (storage.NextAttempt)
	config               json.RawMessage
	run                  string // the run's name
	runDir               string
	scratch              string         // where NewCheckpointDir makes directories: runDir's .scratch, or memory (staging.go)
	cache                string         // the node's cache of an object store's checkpoints (restore_object.go)
	releaseNode          []func() error // release cache and a memory scratch (closeStorage)
	group                *collective.Group
	store                storage.RunStore   // rank 0 only
	sharded              storage.Sharded    // rank 0 on an object store: store, whose ranks upload their own files
	objects              *storage.RankStore // every rank on an object store
	storageCtx           context.Context    // what the storage is opened with (runGeneration); nil: the restore's
	writes               *writeQueue        // rank 0: storage writes, in order
	async                bool               // checkpoint uploads go on after Report returns
	events               *eventLog
	log                  hclog.Logger
	now                  func() time.Time
	stop                 stopRequest              // this process was asked to stop
	wd                   *watchdog                // told of every completed collective
	hb                   heartbeat                // likewise (a Consul TTL check)
	publish              func(rec storage.Record) // rank 0: show the latest report to the CLI
	metrics              *workerMetrics           // nil: no metrics served
	grow                 *growth                  // nil: never grows (see elastic.go)

	// Owned by the training goroutine: a Session is not for concurrent use.
	step       int64
	resumed    bool // step holds the resume point's (restore is done)
	latest     *Checkpoint
	start      string  // the copy this rank made of the checkpoint the run starts from, until one of the run's own is committed
	stopAgreed bool    // ShouldCheckpoint said yes: the gang is stopping
	leaving    []bool  // by rank: asked to stop, as the gang agreed (nil: none)
	ledger     ledger  // rank 0: reports not yet handed to writes
	up         *upload // this rank's latest upload (object store)
	nextName   string  // rank 0: checkpoint name reserved for the next report with one

	// began is when restore handed over to the training function, and
	// trainedBefore (rank 0) what the checkpoint it resumed from had
	// trained: a record's TimeTotal is their sum with the time since.
	began         time.Time
	trainedBefore time.Duration
}

// ShouldCheckpoint reports whether any worker of the gang has been asked to
// stop (a SIGTERM, as Nomad sends on stop, drain and preemption). It is
// collective: call it on every rank at the same point, for example once per
// step. When it returns true on one rank it does on all: report a
// checkpoint of the current state and return from the training function.
// The workers that were asked to stop then exit; the others stay and, when
// only some were asked, call the training function again in the next
// generation, with their replacements, from that checkpoint: no step is
// lost (see stop.go).
func (s *Session) ShouldCheckpoint(ctx context.Context) (bool, error) {
	if err := s.voteStop(ctx); err != nil {
		return false, fmt.Errorf("agree on stop: %w", err)
	}
	return s.stopAgreed, nil
}

// RunName is the run's name: the spec's, or a tune trial's (trial_0003),
// as Ray's train context gives its trial name.
func (s *Session) RunName() string { return s.run }

// WorldRank is this worker's rank in the gang, 0..WorldSize-1.
func (s *Session) WorldRank() int { return s.rank }

// WorldSize is the number of workers in the gang.
func (s *Session) WorldSize() int { return s.size }

// LocalRank is this worker's rank among the workers on its node.
func (s *Session) LocalRank() int { return s.localRank }

// LocalWorldSize is the number of workers on this worker's node.
func (s *Session) LocalWorldSize() int { return s.localSize }

// NodeRank is the rank of this worker's node among the gang's nodes.
func (s *Session) NodeRank() int { return s.nodeRank }

// Generation is the rendezvous generation this session belongs to: 1 for
// the gang's first, one more after every failure it recovered from.
func (s *Session) Generation() uint64 { return s.generation }

// Config is the training loop config as JSON ("null" when none was given).
func (s *Session) Config() json.RawMessage { return s.config }

// DecodeConfig decodes the training loop config into v (see DecodeConfig).
func (s *Session) DecodeConfig(v any) error { return DecodeConfig(s.config, v) }

// DecodeConfig decodes a training loop config (JSON) into v as a Session
// does. A key that v has no field for is an error, so a misspelt setting
// is not silently ignored.
func DecodeConfig(config []byte, v any) error {
	if len(config) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(config))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode train config: %w", err)
	}
	return nil
}

// Logger is this worker's logger, scoped with its rank.
func (s *Session) Logger() hclog.Logger { return s.log }

// GetCheckpoint returns the latest committed checkpoint of the run, or nil
// when there is none: at the start of a resumed run it is the checkpoint to
// restore from, whole. On an object store, a checkpoint committed during
// the run is this node's local copy, which holds the files of this node's
// ranks only (the others' are on S3).
func (s *Session) GetCheckpoint() *Checkpoint { return s.latest }

// NewCheckpointDir returns a fresh empty directory to build a checkpoint
// in: on the run's storage directory, from which Report moves its files
// into the committed checkpoint (a rename rather than a copy), or, on an
// object store, in the node's local cache directory (or in memory:
// CheckpointConfig.Staging), from which this rank uploads them. It is the
// only kind of directory Report accepts: a rank's checkpoint must be
// built in a directory this rank's NewCheckpointDir made.
func (s *Session) NewCheckpointDir() (string, error) {
	dir := s.scratch
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("make checkpoint scratch dir: %w", err)
	}
	d, err := os.MkdirTemp(dir, fmt.Sprintf("rank%d-", s.rank))
	if err != nil {
		return "", fmt.Errorf("make checkpoint dir: %w", err)
	}
	return d, nil
}

// reportRestore tells the run's events about the checkpoints restore passed
// over as corrupt (storage logged them too), about an unverified one, and
// about the one restored, with how long finding, fetching and checking it
// took (took; on S3 that is its download).
func (s *Session) reportRestore(r storage.Restore, took time.Duration) {
	for _, b := range r.Skipped {
		s.events.emit("checkpoint_corrupt", fmt.Sprintf("%v; moved to %s, falling back to an older checkpoint", b.Err, b.MovedTo),
			map[string]string{"checkpoint": b.Name})
	}
	if r.Unverified {
		s.events.emit("checkpoint_unverified", fmt.Sprintf("checkpoint %s has no manifest (written by an earlier version): restored unverified", r.Name),
			map[string]string{"checkpoint": r.Name})
	}
	if r.OK {
		s.events.emit("checkpoint_restored", fmt.Sprintf("checkpoint %s (step %d) restored in %v", r.Name, r.Record.Step, took.Round(time.Millisecond)),
			map[string]string{"checkpoint": r.Name, "step": fmt.Sprint(r.Record.Step), "seconds": fmt.Sprintf("%.3f", took.Seconds())})
	}
}

// gatherJSON all-gathers one JSON value per rank.
func (s *Session) gatherJSON(ctx context.Context, v any) ([][]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return s.AllGather(ctx, b)
}

// done tells the watchdog, and the health check once the step is known, a
// collective completed.
func (s *Session) done(err error) error {
	if err == nil {
		s.wd.progress(time.Now())
		s.beat()
	}
	return err
}

// beat feeds the health check the step, once restore has set it: a beat
// from restore's own collective would show step 0 for a resumed run.
func (s *Session) beat() {
	if s.hb != nil && s.resumed {
		s.hb.Beat(s.step)
	}
}

// AllReduceFloat32 reduces buf across all ranks in place (sum or mean);
// every rank ends with the same bits.
func (s *Session) AllReduceFloat32(ctx context.Context, buf []float32, op collective.Op) error {
	start := time.Now()
	err := s.group.AllReduceFloat32(ctx, buf, op)
	s.metrics.allReduceTook(time.Since(start))
	return s.done(err)
}

// AllReduceFloat64 reduces buf across all ranks in place (sum or mean).
func (s *Session) AllReduceFloat64(ctx context.Context, buf []float64, op collective.Op) error {
	start := time.Now()
	err := s.group.AllReduceFloat64(ctx, buf, op)
	s.metrics.allReduceTook(time.Since(start))
	return s.done(err)
}

// Broadcast copies root's buf to every rank's buf (same length everywhere).
func (s *Session) Broadcast(ctx context.Context, buf []byte, root int) error {
	return s.done(s.group.Broadcast(ctx, buf, root))
}

// AllGather returns every rank's in, indexed by rank.
func (s *Session) AllGather(ctx context.Context, in []byte) ([][]byte, error) {
	out, err := s.group.AllGather(ctx, in)
	return out, s.done(err)
}

// Barrier returns once every rank has entered it.
func (s *Session) Barrier(ctx context.Context) error { return s.done(s.group.Barrier(ctx)) }

// Sum and Mean are the all-reduce operations.
const (
	Sum  = collective.Sum
	Mean = collective.Mean
)
