package trainer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// resumePoint is what rank 0 tells the others at start-up.
type resumePoint struct {
	Step       int64  `json:"step"`
	Checkpoint string `json:"checkpoint,omitempty"`
	Name       string `json:"name,omitempty"` // the checkpoint's
	// CheckpointTime is the checkpoint's record's time: with Step, it
	// tells a node's copy of it from one of an earlier commit of the name.
	CheckpointTime time.Time `json:"checkpoint_time,omitzero"`
	// From is set when Checkpoint is not the run's own but the one it
	// starts from (CheckpointConfig.ResumeFrom), for each node to fetch.
	From string `json:"from,omitempty"`
	// RunDir is the run directory as an absolute path; every rank builds
	// its checkpoints under it, so it must be the same directory for all.
	RunDir string `json:"run_dir,omitempty"`
	// Probe is the content of probeFile, which rank 0 wrote under RunDir
	// for the others to read back (empty in a gang of one).
	Probe string `json:"probe,omitempty"`
	Err   string `json:"err,omitempty"`
	// StartErr is why rank 0 could not fetch the checkpoint to start
	// from, a fault no restart mends (ErrStartCheckpoint).
	StartErr string `json:"start_err,omitempty"`
}

// probeFile is written by rank 0 in the run's scratch directory at start-up;
// a rank that cannot read it back does not share rank 0's storage.
const probeFile = "shared-probe"

// readProbe reads the probe as rank sees the file system; tests replace it
// to give a rank another node's view.
var readProbe = func(rank int, path string) ([]byte, error) { return os.ReadFile(path) }

// ErrUnsharedStorage is returned when a rank cannot see the run directory
// rank 0 opened: storage_path is not one directory shared by every worker,
// so checkpoints could be neither assembled nor restored.
var ErrUnsharedStorage = errors.New("storage_path is not shared between workers")

// ErrStartCheckpoint is returned when the checkpoint a run is to start
// from (CheckpointConfig.ResumeFrom) is not there, is not a checkpoint's
// location, or does not match its manifest: no restart can change that,
// so the run fails at once.
var ErrStartCheckpoint = errors.New("cannot start from the checkpoint resume_from names")

// startError is ErrStartCheckpoint with what went wrong, in the words
// rank 0 hands every rank through the resume point.
type startError string

func (e startError) Error() string { return string(e) }
func (e startError) Unwrap() error { return ErrStartCheckpoint }

// restore opens storage on rank 0, finds where the run left off, and tells
// every rank; each other rank checks it sees the same run directory.
func (s *Session) restore(ctx context.Context, env workerenv.Env) error {
	var rp resumePoint
	if err := s.openNodeCache(env); err != nil {
		return err
	}
	s.scratch = s.memoryScratch(env)
	s.beforeResume(env)
	if s.rank == 0 {
		rp = s.openStorage(s.storageContext(ctx), env)
	}
	all, err := s.gatherJSON(ctx, rp)
	if err != nil {
		return fmt.Errorf("share resume point: %w", err)
	}
	if err := json.Unmarshal(all[0], &rp); err != nil {
		return fmt.Errorf("decode resume point: %w", err)
	}
	if rp.StartErr != "" {
		return startError(rp.StartErr)
	}
	if rp.Err != "" {
		return fmt.Errorf("open run storage: %s", rp.Err)
	}
	s.useMemoryScratch()
	if rp.Probe != "" {
		if err := s.checkShared(ctx, env, rp); err != nil {
			return err
		}
	}
	if err := s.afterResume(ctx, env, &rp); err != nil {
		return err
	}
	s.runDir = rp.RunDir
	if s.scratch == "" {
		s.scratch = filepath.Join(s.runDir, scratchDir)
	}
	s.step, s.resumed, s.began = rp.Step, true, s.now()
	if rp.Checkpoint != "" {
		s.latest = CheckpointFromDirectory(rp.Checkpoint)
	}
	s.beat()
	return nil
}

// checkShared has every rank other than 0 read back rank 0's probe, and
// all ranks learn the first rank that could not, so the whole gang fails
// with the same clear error rather than at the first checkpoint or restore.
func (s *Session) checkShared(ctx context.Context, env workerenv.Env, rp resumePoint) error {
	path := filepath.Join(rp.RunDir, scratchDir, probeFile)
	var mine string
	if s.rank != 0 {
		if b, err := readProbe(s.rank, path); err != nil || string(b) != rp.Probe {
			mine = fmt.Sprintf("rank %d cannot read %s, which rank 0 wrote", s.rank, path)
		}
	}
	all, err := s.gatherJSON(ctx, mine)
	if err != nil {
		return fmt.Errorf("check shared storage: %w", err)
	}
	for _, raw := range all {
		var msg string
		if err := json.Unmarshal(raw, &msg); err != nil {
			return fmt.Errorf("check shared storage: %w", err)
		}
		if msg != "" {
			return fmt.Errorf("%w: %s (storage_path %q; every worker must see the same directory at the same path, such as an NFS, host or CSI volume mounted on every node)",
				ErrUnsharedStorage, msg, env.StoragePath)
		}
	}
	return nil
}

func (s *Session) openStorage(ctx context.Context, env workerenv.Env) resumePoint {
	policy := storagePolicy(env.Checkpoint)
	if env.FsyncCheckpointsOnly {
		policy.Fsync = storage.FsyncCheckpointRecords
	}
	// On an object store the run directory is the node's local cache,
	// where checkpoints are built and restored; the ranks upload their
	// own files, so they share no directory and there is no probe.
	st, err := storage.OpenStore(ctx, env.StoragePath, env.RunName, policy, s.storageOptions(env)...)
	if err != nil {
		return resumePoint{Err: err.Error()}
	}
	s.store, s.writes = st, newWriteQueue()
	s.sharded, _ = st.(storage.Sharded)
	// Checkpoints half-built by an earlier attempt are garbage now.
	scratch := s.clearScratch(st.LocalDir())
	runDir, err := filepath.Abs(st.LocalDir())
	if err != nil {
		return resumePoint{Err: err.Error()}
	}
	probe := ""
	if s.size > 1 && s.sharded == nil {
		if probe, err = writeProbe(scratch); err != nil {
			return resumePoint{Err: err.Error()}
		}
	}
	recs, err := st.Records()
	if err != nil {
		return resumePoint{Err: err.Error()}
	}
	s.recordAttempt = storage.NextAttempt(recs)
	restoring := time.Now()
	latest, err := st.LatestIntact()
	if err != nil {
		return resumePoint{Err: err.Error()}
	}
	s.reportRestore(latest, time.Since(restoring))
	name, ok := latest.Name, latest.OK
	// Training restarts from the latest checkpoint (or from scratch), so
	// reports made after it are rolled back: the history then reads as if
	// the run had never failed.
	rp := resumePoint{RunDir: runDir, Probe: probe, Name: name}
	s.trainedBefore = 0
	if ok {
		if rp.Checkpoint, err = filepath.Abs(latest.Path); err != nil {
			return resumePoint{Err: err.Error()}
		}
		for _, r := range recs {
			if r.Checkpoint == name {
				rp.Step, rp.CheckpointTime, s.trainedBefore = r.Step, r.Time, r.TimeTotal
			}
		}
	} else if from := env.Checkpoint.ResumeFrom; from != "" {
		if rp.Checkpoint, err = s.fetchStart(ctx, env, filepath.Join(runDir, scratchDir)); err != nil {
			if errors.Is(err, ErrStartCheckpoint) { // every rank fails with it
				return resumePoint{StartErr: err.Error()}
			}
			return resumePoint{Err: err.Error()}
		}
		rp.From = from
	}
	if err := st.TruncateAfter(rp.Step); err != nil {
		return resumePoint{Err: err.Error()}
	}
	return rp
}

// writeProbe writes a random token to probeFile in dir and returns it.
func writeProbe(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("make checkpoint scratch dir: %w", err)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b[:])
	if err := os.WriteFile(filepath.Join(dir, probeFile), []byte(token), 0o644); err != nil {
		return "", fmt.Errorf("write storage probe: %w", err)
	}
	return token, nil
}

// fetchStart makes the node's copy, in local (a scratch directory of the
// run's), of the checkpoint the run starts from while it has none of its
// own (CheckpointConfig.ResumeFrom), once for the node's ranks, and
// returns its directory. Rank 0 tells the run's events.
func (s *Session) fetchStart(ctx context.Context, env workerenv.Env, local string) (string, error) {
	from := env.Checkpoint.ResumeFrom
	began := time.Now()
	dir, fetched, err := storage.FetchStartCheckpoint(ctx, from, local, s.sessionStorage(env)...)
	var bad *storage.CheckpointError
	switch {
	case errors.Is(err, storage.ErrNoCheckpoint), errors.Is(err, storage.ErrUnsupportedScheme),
		errors.Is(err, storage.ErrNotCheckpointLocation), errors.As(err, &bad):
		return "", startError(fmt.Sprintf("%v: %s: %v", ErrStartCheckpoint, from, err))
	case err != nil:
		return "", fmt.Errorf("fetching the checkpoint to start from (resume_from %s): %w", from, err)
	}
	took := time.Since(began)
	if fetched {
		s.log.Info("fetched the checkpoint to start from for this node", "checkpoint", from, "dir", dir, "took", took)
		s.start = dir // this rank made the copy, so it removes it (dropStart)
	}
	if s.rank == 0 {
		s.noteStart(ctx, env, from, dir)
		s.events.emit("checkpoint_restored", fmt.Sprintf("starting from checkpoint %s (resume_from; the run has none of its own), copied in %v", from, took.Round(time.Millisecond)),
			map[string]string{"checkpoint": from, "resume_from": "true", "seconds": fmt.Sprintf("%.3f", took.Seconds())})
	}
	return dir, nil
}

// dropStart removes the node's copy of the checkpoint the run started from
// once the gang has committed one of its own, which a restart resumes
// from instead: every rank had reported, so had loaded it, for the commit.
// The rank that made the copy removes it.
func (s *Session) dropStart() {
	dir := s.start
	s.start = ""
	if err := os.RemoveAll(dir); err != nil {
		s.log.Warn("could not remove the copy of the checkpoint the run started from", "dir", dir, "error", err)
	}
}

// noteStart records, beside the run, the checkpoint it starts from
// (launch.StartFile), for status and the summary. A note that cannot be
// written costs that line, not the run: it is only logged.
func (s *Session) noteStart(ctx context.Context, env workerenv.Env, from, dir string) {
	start := launch.Start{From: from}
	if m, ok, err := storage.ReadManifest(dir); ok && err == nil { // the copy was checked against it
		start.Step = m.Record.Step
	}
	if err := launch.WriteStart(ctx, env.StoragePath, env.RunName, start, s.sessionStorage(env)...); err != nil {
		s.log.Warn("could not note the checkpoint the run started from", "error", err)
	}
}
