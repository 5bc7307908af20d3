package launch

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/nomad-train/nomad-train/internal/english"
	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Replacements of a rank whose processes keep failing quickly wait longer
// each time: minReplaceDelay, doubling up to maxReplaceDelay. A process
// that ran for healthyAfter or longer starts its rank over.
const (
	minReplaceDelay = 100 * time.Millisecond
	maxReplaceDelay = 10 * time.Second
	healthyAfter    = maxReplaceDelay
)

// replaceDelay is the wait before the replacement that follows quick
// failures in a row of one rank (0 for the first).
func replaceDelay(quick int) time.Duration {
	d := minReplaceDelay
	for range quick {
		if d >= maxReplaceDelay/2 {
			return maxReplaceDelay
		}
		d *= 2
	}
	return d
}

// replacementDelay records a failure of rank's process, which ran for ran,
// and returns how long its replacement waits.
func (g *gang) replacementDelay(rank int, ran time.Duration) time.Duration {
	if ran >= healthyAfter {
		g.quickFailures[rank] = 0
	}
	d := replaceDelay(g.quickFailures[rank])
	g.quickFailures[rank]++
	return d
}

// withinBudget reports whether the gang may recover from a worker failure
// without overspending its failure budget. It counts the way the workers
// do (workerenv.FailuresUsed): every rendezvous generation after the first
// is one gang failure, unless it ended in a stop the gang agreed on, and
// recovering from this one means the next generation (or the one already
// forming, when the survivors are quicker than this launcher; or, for an
// elastic gang, the one they already completed without rank's member). A
// process that failed before it joined a generation broke none, and
// counts by itself.
func (g *gang) withinBudget(joined bool, rank int) bool {
	if !joined {
		g.lostBeforeJoining++
	}
	next := uint64(1)
	if st, ok := g.state(); ok {
		next = st.Generation
		if st.Phase == rendezvous.PhaseComplete && slices.Contains(st.Ranks, memberID(rank)) {
			next++
		}
	}
	stops, err := rendezvous.Stops(context.Background(), g.store, g.opts.Name, 1, next)
	if err != nil {
		stops = 0
	}
	used := workerenv.FailuresUsed(next, 1, stops, g.lostBeforeJoining)
	if workerenv.BudgetExhausted(used, g.opts.MaxFailures) {
		g.exhausted = fmt.Sprintf("failure budget exhausted: the gang failed %s, max_failures is %d", english.Count(used, "time", "times"), g.opts.MaxFailures)
		return false
	}
	return true
}

// eventsSize is the size of the events file at path, where the events
// of a process started now begin.
func eventsSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// joinedSince reports whether the events file at path records a completed
// rendezvous after offset: whether the process that began writing there
// joined a generation.
func joinedSince(path string, offset int64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return false
	}
	dec := json.NewDecoder(f)
	for {
		var ev workerenv.Event
		if err := dec.Decode(&ev); err != nil {
			return false // the end, or a line cut short by a kill
		}
		if ev.Kind == "rendezvous_complete" {
			return true
		}
	}
}
