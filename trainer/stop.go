package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nomad-train/nomad-train/trainer/collective"
	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// A stop of some workers is not a stop of the run. Nomad stops one
// worker's allocation (nomad alloc stop, a node drain, a preemption) with a
// SIGTERM to that worker alone, and replaces it. The gang then agrees at
// the next step boundary (ShouldCheckpoint) on the set of members that were
// asked to stop and checkpoints together, so no step is lost. Then:
//
//   - every member was asked (the whole job is stopping): all leave, and
//     the run ends as stopped (ExitStopped everywhere);
//   - otherwise only those asked leave (ExitStopped); the others stay in
//     their processes, join the next generation with the replacements and
//     resume from the checkpoint just committed.
//
// Either way the generation ended by agreement, not by a failure: every
// member records it in the rendezvous store (rendezvous.RecordStop) before
// the finish barrier, and the failure budget leaves it out.

// voteStop has every rank say whether it was asked to stop, and adds the
// ranks that were to s.leaving. It is collective.
func (s *Session) voteStop(ctx context.Context) error {
	votes := make([]float64, s.size)
	if s.stop.requested() {
		votes[s.rank] = 1
	}
	if err := s.done(s.group.AllReduceFloat64(ctx, votes, collective.Sum)); err != nil {
		return err
	}
	for r, v := range votes {
		if v == 0 {
			continue
		}
		if s.leaving == nil {
			s.leaving = make([]bool, s.size)
		}
		s.leaving[r] = true
		s.stopAgreed = true
	}
	return nil
}

// leaves says whether the member of rank leaves after an agreed stop in
// which the ranks marked in leaving were asked to stop: when it was itself
// asked (at the vote, or since: askedSince), or when every member was.
func leaves(leaving []bool, rank int, askedSince bool) bool {
	if askedSince || (rank < len(leaving) && leaving[rank]) {
		return true
	}
	for _, l := range leaving {
		if !l {
			return false
		}
	}
	return true
}

// leavingIDs names the members of a that leave in an agreed stop.
func leavingIDs(a rendezvous.Assignment, leaving []bool) []string {
	var ids []string
	for r, l := range leaving {
		if l && r < len(a.Peers) {
			ids = append(ids, a.Peers[r].ID)
		}
	}
	return ids
}

// recordStop records the agreed stop of a's generation in the rendezvous
// store (best effort: without the record the next generation counts as a
// failure, which spends budget but loses nothing).
func (w *worker) recordStop(ctx context.Context, a rendezvous.Assignment, leaving []bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := rendezvous.RecordStop(ctx, w.store, w.env.RunName, a.Generation, leavingIDs(a, leaving)); err != nil {
		w.log.Warn("cannot record the agreed stop; the next generation will count as a failure", "error", err)
	}
}

// afterStop ends a generation whose gang agreed to stop: ErrStopped for a
// member that leaves, and for one that stays a *gangLost marked as a stop,
// on which it joins the next generation.
func (w *worker) afterStop(a rendezvous.Assignment, leaving []bool) error {
	if leaves(leaving, a.Rank, w.stop.requested()) {
		return ErrStopped
	}
	ids := leavingIDs(a, leaving)
	w.ev.emit("workers_stopped", fmt.Sprintf("%s stopped; waiting for the replacement", strings.Join(ids, ", ")),
		map[string]string{"generation": fmt.Sprint(a.Generation), "stopped": strings.Join(ids, ",")})
	return &gangLost{generation: a.Generation, stopped: true,
		cause: fmt.Sprintf("%s stopped at a checkpoint the gang agreed on", strings.Join(ids, ", "))}
}

// failuresUsed counts the gang's failures before generation gen in this
// attempt at the run, whose first generation is first: one per generation
// after it, less
// the generations that ended in an agreed stop. When the store cannot say
// which did, every generation counts.
func (w *worker) failuresUsed(ctx context.Context, first, gen uint64) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	stops, err := rendezvous.Stops(ctx, w.store, w.env.RunName, first, gen)
	if err != nil {
		w.log.Warn("cannot count agreed stops; counting every generation as a failure", "error", err)
		stops = 0
	}
	return workerenv.FailuresUsed(gen, first, stops, 0)
}

// watchStop turns the first SIGTERM or SIGINT into a stop request that the
// training function reads through ShouldCheckpoint, and cancels ctx (with
// ErrStopped) when a second signal comes or grace has passed, so a worker
// that ignores the request still ends.
func watchStop(ctx context.Context, cancel context.CancelCauseFunc, grace time.Duration, ev *eventLog) stopRequest {
	requested := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		defer signal.Stop(sigs)
		select {
		case sig := <-sigs:
			close(requested)
			ev.emit("stop_requested", fmt.Sprintf("%v: checkpoint and stop within %v", sig, grace), nil)
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-sigs:
		case <-t.C:
		case <-ctx.Done():
			return
		}
		cancel(ErrStopped)
	}()
	return stopRequest(requested)
}

// stopRequest is closed when the worker is asked to stop.
type stopRequest <-chan struct{}

// requested reports whether the stop was asked for (never, for a nil one:
// a nil channel never delivers).
func (r stopRequest) requested() bool {
	select {
	case <-r:
		return true
	default:
		return false
	}
}

// ErrUser marks a failure of the training function itself.
var ErrUser = errors.New("training function failed")
