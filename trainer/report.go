package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// scratchDir holds checkpoints being built, under the run directory (on
// an object store, under the node's local cache directory).
const scratchDir = ".scratch"

// reportMsg is what each rank tells the others in a Report.
type reportMsg struct {
	// Checkpoint is the rank's checkpoint directory, which rank 0 moves
	// into the checkpoint (a directory store: the ranks share it).
	Checkpoint string `json:"checkpoint,omitempty"`
	// On an object store each rank uploads its own files: Files lists
	// them (for the name check every rank makes), Mistake says why its
	// directory was refused, Next is the name rank 0 reserved for a
	// checkpoint reported now, Fail why rank 0 could not, and Uploaded
	// says how this rank's earlier uploads went (asynchronous uploads).
	Has      bool           `json:"has,omitempty"`
	Files    []string       `json:"files,omitempty"`
	Mistake  string         `json:"mistake,omitempty"`
	Next     string         `json:"next,omitempty"`
	Fail     string         `json:"fail,omitempty"`
	Uploaded []uploadResult `json:"uploaded,omitempty"`
}

// reportAck is rank 0's answer: the checkpoints committed since the last
// answer, or the error.
type reportAck struct {
	Committed []string `json:"committed,omitempty"`
	Err       string   `json:"err,omitempty"`
	// Mistake marks an Err that is the training function's own (a
	// checkpoint path it may not report): no restart can fix it.
	Mistake bool `json:"mistake,omitempty"`
	// Grow: a checkpoint committed, and a newcomer waits for the gang:
	// every rank ends the generation here to grow (see elastic.go).
	Grow bool `json:"grow,omitempty"`
}

// ErrReport is wrapped by Report errors that happened on rank 0 while
// recording the report, and by those of a rank's checkpoint upload.
var ErrReport = errors.New("report failed")

// Report records metrics and, when any rank passes one, a checkpoint made of
// the files of every rank's checkpoint directory (each from that rank's
// NewCheckpointDir; any other path is refused). Every rank must call it,
// in step. Rank 0's metrics are recorded.
//
// By default the checkpoint is committed atomically before Report
// returns on any rank, and becomes GetCheckpoint. With asynchronous
// uploads (CheckpointConfig.AsyncUpload) Report returns once the
// checkpoint is staged: the upload and commit go on in the background, in
// order; the next Report with a checkpoint waits for the previous one's
// upload only if it is still going; a failed upload fails the next
// Report on every rank; GetCheckpoint moves to a checkpoint once it is
// committed (a later Report says so). Records are written in step order,
// and a checkpoint's record only after its manifest.
func (s *Session) Report(ctx context.Context, metrics Metrics, ckpt *Checkpoint) error {
	s.step++
	if err := s.report(ctx, metrics, ckpt); err != nil {
		return fmt.Errorf("report step %d: %w", s.step, err)
	}
	s.metrics.reportedStep(s.step, metrics)
	return nil
}

func (s *Session) report(ctx context.Context, metrics Metrics, ckpt *Checkpoint) error {
	mine, own, err := s.reportMsg(ctx, ckpt)
	if err != nil {
		return err
	}
	msgs, err := gatherAs[reportMsg](ctx, s, mine)
	if err != nil {
		return err
	}
	var name string
	results := map[int]uploadResult{}
	if s.objects != nil && anyCheckpoint(msgs) {
		if err := checkObjectReport(msgs); err != nil {
			return err
		}
		name = msgs[0].Next
		if s.rank == 0 {
			s.nextName = ""
		}
		if own != "" {
			s.up = startUpload(s.objects, name, own, s.rank)
		}
		if !s.async {
			if results, err = s.uploadResults(ctx, name); err != nil {
				return err
			}
		}
	}
	var ack reportAck
	if s.rank == 0 {
		ack = s.record(ctx, metrics, msgs, name, results)
	}
	return s.answer(ctx, ack)
}

// reportMsg is this rank's part of a report. own is the checkpoint
// directory this rank uploads itself (object store).
func (s *Session) reportMsg(ctx context.Context, ckpt *Checkpoint) (m reportMsg, own string, err error) {
	if s.objects == nil {
		if ckpt != nil {
			m.Checkpoint = ckpt.Path()
		}
		return m, "", nil
	}
	if s.rank == 0 && s.nextName == "" {
		if s.nextName, err = s.sharded.Reserve(); err != nil {
			m.Fail = err.Error()
		}
	}
	m.Next = s.nextName
	if ckpt != nil {
		m.Has = true
		own, err = ownCheckpointDir(s.scratch, s.rank, ckpt.Path())
		if err == nil {
			m.Files, err = treeFiles(own)
		}
		if err != nil {
			m.Mistake = err.Error()
		}
	}
	began := time.Now()
	if u := s.up; u != nil && !u.sent {
		// The next checkpoint waits for the previous one's upload; a
		// report without one only says how it went, if it has ended.
		if ckpt != nil {
			if err := u.wait(ctx); err != nil {
				return m, "", err
			}
		}
		if u.finished() {
			m.Uploaded, u.sent = []uploadResult{u.res}, true
		}
	}
	if ckpt != nil && s.async {
		s.metrics.uploadWaited(time.Since(began)) // 0 when there was none to wait for
	}
	return m, own, nil
}

// uploadResults waits for this rank's upload of name and shares how every
// rank's went (synchronous uploads).
func (s *Session) uploadResults(ctx context.Context, name string) (map[int]uploadResult, error) {
	var mine *uploadResult
	if u := s.up; u != nil && u.name == name {
		if err := u.wait(ctx); err != nil {
			return nil, err
		}
		mine, u.sent = &u.res, true
	}
	all, err := gatherAs[*uploadResult](ctx, s, mine)
	if err != nil {
		return nil, err
	}
	out := map[int]uploadResult{}
	for r, res := range all {
		if res != nil {
			out[r] = *res
		}
	}
	return out, nil
}

// answer shares rank 0's answer and acts on it on every rank.
func (s *Session) answer(ctx context.Context, ack reportAck) error {
	acks, err := gatherAs[reportAck](ctx, s, ack)
	if err != nil {
		return err
	}
	ack = acks[0]
	if ack.Mistake {
		// Not ErrReport: the training function's own error, not retried.
		return errors.New(ack.Err)
	}
	if ack.Err != "" {
		return fmt.Errorf("%w: %s", ErrReport, ack.Err)
	}
	for _, name := range ack.Committed {
		s.latest = CheckpointFromDirectory(filepath.Join(s.runDir, name))
		s.events.emit("checkpoint_committed", fmt.Sprintf("checkpoint %s committed at step %d", name, s.step),
			map[string]string{"checkpoint": name, "step": fmt.Sprint(s.step)})
	}
	if n := len(ack.Committed); n > 0 && s.objects != nil {
		if err := s.objects.KeepOnly(ack.Committed[n-1]); err != nil {
			s.log.Warn("could not prune the local checkpoint cache", "error", err)
		}
	}
	if len(ack.Committed) > 0 && s.start != "" {
		s.dropStart()
	}
	if ack.Grow && s.grow != nil {
		return s.grow.end()
	}
	return nil
}

// settle waits, at the end of the training function, for the uploads and
// commits still going (asynchronous uploads), so that the run's last
// checkpoint is committed before the workers leave: after a stop too,
// within its grace period. Collective, as Report is.
func (s *Session) settle(ctx context.Context) error {
	if !s.async {
		return nil
	}
	var mine reportMsg
	if u := s.up; u != nil && !u.sent {
		if err := u.wait(ctx); err != nil {
			return err
		}
		mine.Uploaded, u.sent = []uploadResult{u.res}, true
	}
	msgs, err := gatherAs[reportMsg](ctx, s, mine)
	if err != nil {
		return fmt.Errorf("finish checkpoint uploads: %w", err)
	}
	var ack reportAck
	if s.rank == 0 {
		ack = s.flush(ctx, msgs, nil, true)
	}
	if err := s.answer(ctx, ack); err != nil {
		return fmt.Errorf("finish checkpoint uploads: %w", err)
	}
	return nil
}

// record queues one report on rank 0: a plain record, or a checkpoint
// (name, reserved, when the ranks upload their files; otherwise made of
// every rank's files, moved into a staged checkpoint here).
func (s *Session) record(ctx context.Context, metrics Metrics, msgs []reportMsg, name string, results map[int]uploadResult) reportAck {
	now := s.now()
	e := &entry{rec: storage.Record{Step: s.step, Time: now, Metrics: metrics, Generation: s.generation, Attempt: s.recordAttempt}}
	if !s.began.IsZero() {
		e.rec.TimeTotal = s.trainedBefore + now.Sub(s.began)
	}
	if name != "" {
		e.ckpt, e.waiting = name, map[int]bool{}
		for r, m := range msgs {
			if m.Has {
				e.waiting[r] = true
			}
		}
	} else if s.objects == nil {
		staged, ack := s.stageFromRanks(ctx, msgs)
		if ack != nil {
			return *ack
		}
		e.staged = staged
	}
	s.ledger.add(e)
	ack := s.flush(ctx, msgs, results, !s.async)
	ack.Grow = ack.Err == "" && len(ack.Committed) > 0 && s.grow != nil && s.grow.pending.Load()
	return ack
}

// flush hands the ledger's ready writes to the write queue, waits for
// them when wait is set, and builds the answer.
func (s *Session) flush(ctx context.Context, msgs []reportMsg, results map[int]uploadResult, wait bool) reportAck {
	for r, m := range msgs {
		for _, res := range m.Uploaded {
			s.ledger.heard(r, res)
		}
	}
	for r, res := range results {
		s.ledger.heard(r, res)
	}
	ready, dropped, lerr := s.ledger.ready()
	for _, e := range ready {
		s.submit(e)
	}
	if lerr != nil {
		wait = true // the earlier writes still count
	}
	var err error
	if wait {
		err = s.writes.wait(ctx)
	}
	committed, qerr := s.writes.state()
	ack := reportAck{Committed: committed}
	switch {
	case lerr != nil:
		for _, d := range dropped {
			if d.own != "" {
				os.RemoveAll(d.own) // rank 0's files, never uploaded
			}
			if err := s.sharded.Abandon(d.name); err != nil {
				s.log.Warn("could not delete the files of a failed checkpoint", "checkpoint", d.name, "error", err)
			}
		}
		ack.Err = lerr.Error()
	case qerr != nil:
		ack.Err = qerr.Error()
	case err != nil:
		ack.Err = err.Error()
	}
	return ack
}

// submit queues the writes of one ready report.
func (s *Session) submit(e *entry) {
	s.writes.submit(func() error {
		started := time.Now()
		rec := e.rec
		switch {
		case e.staged != nil:
			name, err := s.store.Commit(e.staged, rec)
			if err != nil {
				return err
			}
			rec.Checkpoint = name
		case e.ckpt != "":
			if err := s.sharded.CommitFiles(e.ckpt, rec, e.files, e.own); err != nil {
				return err
			}
			rec.Checkpoint = e.ckpt
		default:
			if err := s.store.Append(rec); err != nil {
				return err
			}
		}
		if rec.Checkpoint != "" {
			s.metrics.committed(time.Since(started))
			s.writes.commitDone(rec.Checkpoint)
		}
		s.publish(rec)
		return nil
	})
}

// stageFromRanks moves every rank's checkpoint files into one staged
// checkpoint (a directory store, which the ranks share). It returns nil
// when no rank reported one, and the answer when the report fails.
func (s *Session) stageFromRanks(ctx context.Context, msgs []reportMsg) (*storage.Staged, *reportAck) {
	var dirs []string
	byRank := map[int][]string{}
	for r, m := range msgs {
		if m.Checkpoint == "" {
			continue
		}
		d, err := ownCheckpointDir(s.scratch, r, m.Checkpoint)
		if err == nil {
			byRank[r], err = treeFiles(d)
		}
		if err != nil {
			return nil, &reportAck{Err: err.Error(), Mistake: true}
		}
		dirs = append(dirs, d)
	}
	if err := checkNames(byRank); err != nil {
		return nil, &reportAck{Err: err.Error(), Mistake: true}
	}
	if len(dirs) == 0 {
		return nil, nil
	}
	if s.async {
		// The next checkpoint waits for the previous one's commit.
		if err := s.writes.wait(ctx); err != nil {
			return nil, &reportAck{Err: err.Error()}
		}
	}
	staged, err := s.store.Stage()
	if err != nil {
		return nil, &reportAck{Err: err.Error()}
	}
	for _, d := range dirs {
		if err := staged.AddDir(d); err != nil {
			staged.Abort()
			return nil, &reportAck{Err: err.Error()}
		}
		os.Remove(d) // emptied by the move; a copy leaves it for its owner
	}
	return staged, nil
}

// anyCheckpoint says whether some rank reported a checkpoint.
func anyCheckpoint(msgs []reportMsg) bool {
	for _, m := range msgs {
		if m.Has {
			return true
		}
	}
	return false
}

// checkObjectReport is the check every rank makes, alike, of a report
// with a checkpoint on an object store, before any rank uploads.
func checkObjectReport(msgs []reportMsg) error {
	files := map[int][]string{}
	for r, m := range msgs {
		if m.Mistake != "" {
			return errors.New(m.Mistake)
		}
		if m.Has {
			files[r] = m.Files
		}
	}
	if msgs[0].Fail != "" {
		return fmt.Errorf("%w: %s", ErrReport, msgs[0].Fail)
	}
	if msgs[0].Next == "" {
		return fmt.Errorf("%w: rank 0 reserved no checkpoint name", ErrReport)
	}
	return checkNames(files)
}

// gatherAs all-gathers one JSON value per rank and decodes them.
func gatherAs[T any](ctx context.Context, s *Session, v T) ([]T, error) {
	all, err := s.gatherJSON(ctx, v)
	if err != nil {
		return nil, err
	}
	out := make([]T, len(all))
	for r, raw := range all {
		if err := json.Unmarshal(raw, &out[r]); err != nil {
			return nil, fmt.Errorf("decode rank %d's message: %w", r, err)
		}
	}
	return out, nil
}

// closeStorage lets rank 0's queued writes finish, then releases the
// run's storage and its node directories.
func (s *Session) closeStorage() {
	if s.writes != nil {
		s.flushOwnUpload()
		s.writes.close()
	}
	if s.store != nil {
		s.store.Close()
	}
	for _, release := range s.releaseNode {
		release()
	}
	s.releaseNode = nil
}

// flushOwnUpload hears rank 0's last upload, which no report told of (the
// session ends without settle: the gang broke), and queues what then is
// ready: a checkpoint of rank 0's files alone, as a DDP model is saved, is
// committed before the next generation looks for the one to resume from.
// The upload's end is bounded by the storage's context (runGeneration).
func (s *Session) flushOwnUpload() {
	u := s.up
	if s.rank != 0 || u == nil || u.sent {
		return
	}
	<-u.done
	u.sent = true
	s.flush(context.Background(), nil, map[int]uploadResult{0: u.res}, false) // no one to answer
}

// ownCheckpointDir confines the checkpoint directory rank reported to the
// directories NewCheckpointDir makes for that rank: rank 0 moves its files
// into the checkpoint and removes it, so a path anywhere else (another
// rank's directory, a stranger's files outside the run) is refused before
// anything is moved. Links are resolved first; the resolved path is
// returned.
func ownCheckpointDir(scratchRoot string, rank int, reported string) (string, error) {
	refuse := func(why string) (string, error) {
		return "", fmt.Errorf("rank %d reported checkpoint directory %s, which %s: a checkpoint must be built in a directory from Session.NewCheckpointDir", rank, reported, why)
	}
	scratch, err := filepath.EvalSymlinks(scratchRoot)
	if err != nil {
		return refuse(fmt.Sprintf("cannot be checked (%v)", err))
	}
	dir, err := filepath.EvalSymlinks(reported)
	if err != nil {
		return refuse(fmt.Sprintf("cannot be resolved (%v)", err))
	}
	rel, err := filepath.Rel(scratch, dir)
	if err != nil || rel != filepath.Base(rel) || !strings.HasPrefix(rel, fmt.Sprintf("rank%d-", rank)) {
		return refuse(fmt.Sprintf("is not one of rank %d's checkpoint directories under %s", rank, scratch))
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return refuse("is not a directory")
	}
	return dir, nil
}
