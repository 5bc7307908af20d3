package launch

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// RankOutcome is how one worker ended.
type RankOutcome struct {
	Rank     int
	ExitCode int    // 128+signal when killed by a signal
	Signal   string // the signal's name when killed by one
	Err      string // the worker's own account of its failure, when it gave one
	Order    int    // 0 for the first worker to end, 1 for the next...
	Restarts int    // how often this rank's process was replaced
}

// Message describes the failure in words.
func (r RankOutcome) Message() string {
	switch {
	case r.Err != "":
		return r.Err
	case r.Signal != "":
		return "killed by " + r.Signal
	default:
		return fmt.Sprintf("exited with code %d", r.ExitCode)
	}
}

// Secondary reports whether the worker ended only because another one was
// lost, or because it was stopped (as the launcher stops the rest of a
// gang once a worker failed for good, which one waiting for the next
// generation may hear before it hears of the failure), so that it is not
// the cause of a failed run.
func (r RankOutcome) Secondary() bool {
	return r.ExitCode == workerenv.ExitPeerLost || r.ExitCode == workerenv.ExitStopped
}

// Outcome is how every worker of a run ended, indexed by rank.
type Outcome struct {
	Ranks []RankOutcome
	// Restarts lists, in order, the worker failures the gang recovered
	// from (each process replaced by a new one).
	Restarts []RankOutcome
	// Stopped lists, in order, the workers that were stopped on their own
	// (a SIGTERM to that worker alone, exit code ExitStopped) and replaced,
	// as Nomad replaces a stopped or drained allocation. They are no
	// failures: their gang checkpointed and went on without them.
	Stopped []RankOutcome
	// BudgetExhausted says why the run was stopped when its failure budget
	// ran out; empty otherwise.
	BudgetExhausted string
	// FailuresUsed is the gang's failures in this launch as its workers
	// count them against max_failures (workerenv.FailuresUsed): a
	// generation lost without a process to replace (a worker's own child,
	// python3 under the wrapper, died and the gang re-formed) counts too;
	// never fewer than Restarts.
	FailuresUsed int
}

// Failures lists the workers that ended badly, causes first: workers that
// failed by themselves before those that lost a peer, each group in the
// order they ended.
func (o *Outcome) Failures() []RankOutcome {
	var f []RankOutcome
	for _, r := range o.Ranks {
		if r.ExitCode != 0 {
			f = append(f, r)
		}
	}
	sort.SliceStable(f, func(i, j int) bool {
		if f[i].Secondary() != f[j].Secondary() {
			return !f[i].Secondary()
		}
		return f[i].Order < f[j].Order
	})
	return f
}

// Failed reports whether any worker ended badly.
func (o *Outcome) Failed() bool {
	for _, r := range o.Ranks {
		if r.ExitCode != 0 {
			return true
		}
	}
	return false
}

// outcome collects how each worker ended, with the failure each worker
// wrote to its events file.
func (g *gang) outcome(tmp string) *Outcome {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := &Outcome{Ranks: append([]RankOutcome(nil), g.ended...), Restarts: g.restarts, Stopped: g.stopped,
		BudgetExhausted: g.exhausted, FailuresUsed: len(g.restarts)}
	if st, ok := g.state(); ok {
		stops, err := rendezvous.Stops(context.Background(), g.store, g.opts.Name, 1, st.Generation)
		if err == nil {
			out.FailuresUsed = max(out.FailuresUsed, workerenv.FailuresUsed(st.Generation, 1, stops, g.lostBeforeJoining))
		}
	}
	for i := range out.Ranks {
		if out.Ranks[i].ExitCode != 0 && out.Ranks[i].Err == "" {
			out.Ranks[i].Err = lastFailure(eventsPath(tmp, i))
		}
	}
	return out
}

func lastFailure(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	msg := ""
	for {
		var ev workerenv.Event
		if err := dec.Decode(&ev); err != nil {
			return msg
		}
		if ev.Kind == "worker_failed" {
			msg = ev.Message
		}
	}
}
