package trainer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Elastic gangs (Scaling.Min..Max, num_workers = [min, max]). A gang
// starts with at least Min members (rendezvous.Decide); when it loses
// members and has Min left, the survivors re-form at the smaller size from
// the latest checkpoint, as after any loss, without waiting for
// replacements. A member that comes later (a replacement) opens the next
// generation. The gang does not break for it: it trains on to its next
// checkpoint, and there, as rank 0 tells every rank in that report's
// answer, all members record the generation as ended by agreement (no
// failure: the budget leaves it out, as for an agreed stop) and join the
// newcomer's generation at the larger size, resuming from that checkpoint,
// so no step is lost.

// gangSize is the size of gang the worker's environment asks for.
func gangSize(env workerenv.Env) rendezvous.Size {
	if env.MinWorldSize > 0 && env.MinWorldSize < env.WorldSize {
		return rendezvous.Size{Min: env.MinWorldSize, Max: env.WorldSize}
	}
	return rendezvous.Fixed(env.WorldSize)
}

// growth is one generation's pending growth: set when a newcomer is
// waiting for the gang, read by rank 0 at each checkpoint.
type growth struct {
	pending atomic.Bool
	// end ends the generation at the checkpoint just committed, to grow;
	// it returns the cause the training function sees.
	end func() error
}

// mayGrow reports whether ev, seen by a member of a's generation, is a
// newcomer waiting for an elastic gang that is below its maximum rather
// than a loss: the generation moved on and every member of a is still
// there. Anything else breaks the generation at once, as in a fixed gang.
func (w *worker) mayGrow(ctx context.Context, a rendezvous.Assignment, ev rendezvous.LostEvent) bool {
	size := gangSize(w.env)
	if !size.Elastic() || a.WorldSize >= size.Max || ev.Reason != rendezvous.ReasonGenerationChanged || ev.NewGeneration <= a.Generation {
		return false
	}
	missing, err := rendezvous.MissingPeers(ctx, w.store, w.env.RunName, a)
	return err == nil && len(missing) == 0
}

// endToGrow records a's generation as ended by agreement (every member
// does, before any joins the next) and cancels it with a cause on which
// the worker joins the next generation.
func (w *worker) endToGrow(ctx context.Context, a rendezvous.Assignment, cancel context.CancelCauseFunc) error {
	w.recordStop(ctx, a, nil)
	lost := &gangLost{generation: a.Generation, stopped: true,
		cause: fmt.Sprintf("a worker joins the gang of %d at a checkpoint", a.WorldSize)}
	w.ev.emit("gang_growing", lost.cause, map[string]string{"generation": fmt.Sprint(a.Generation)})
	cancel(lost)
	return lost
}

// whoWasLost waits briefly, in an elastic gang whose ring broke, for the
// rendezvous watch to say which member was lost (its alive key goes when
// its connection does): the survivors that name it need not wait for it
// when they re-form. Nil when the watch has not said.
func (w *worker) whoWasLost(gctx context.Context) *gangLost {
	if !gangSize(w.env).Elastic() {
		return nil
	}
	t := time.NewTimer(lossWatchWait)
	defer t.Stop()
	select {
	case <-gctx.Done():
	case <-t.C:
	}
	var lost *gangLost
	if errors.As(context.Cause(gctx), &lost) {
		return lost
	}
	return nil
}

// lossWatchWait bounds whoWasLost's wait.
const lossWatchWait = 250 * time.Millisecond
