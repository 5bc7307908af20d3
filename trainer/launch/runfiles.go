package launch

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// runFiles are what a local run keeps of itself in its run directory: each
// rank's output (LogPath) and the launcher's State. A run whose storage is
// not a local directory keeps neither (dir is "").
type runFiles struct {
	dir     string
	logs    []*rotatingFile // by rank; nil entries where a log could not be opened
	metrics []string        // by rank: the URL its /metrics is served at, or ""
	state   State           // guarded by the gang's mu
}

// openRunFiles opens each rank's log and picks each rank's metrics port.
func openRunFiles(o Options, log func(msg string, args ...any)) *runFiles {
	dir := RunDir(o.StoragePath, o.Name)
	if abs, err := filepath.Abs(dir); err == nil && dir != "" {
		dir = abs // the state names the logs wherever it is read from
	}
	rf := &runFiles{dir: dir, logs: make([]*rotatingFile, o.NumWorkers),
		metrics: make([]string, o.NumWorkers)}
	host, _ := os.Hostname()
	now := time.Now().UTC()
	rf.state = State{Run: o.Name, Host: host, PID: os.Getpid(), Phase: PhaseRunning, Started: now,
		NumWorkers: o.NumWorkers, Workers: make([]WorkerState, o.NumWorkers)}
	for i := range o.NumWorkers {
		rf.state.Workers[i] = WorkerState{Rank: i}
		if rf.dir != "" {
			l, err := openRotating(LogPath(rf.dir, i), LogCap)
			if err != nil {
				log("cannot keep a worker's log", "rank", i, "error", err)
			} else {
				rf.logs[i] = l
				rf.state.Workers[i].Log = LogPath(rf.dir, i)
			}
		}
		if !o.NoMetrics && !setsMetrics(o.Env) && os.Getenv(workerenv.MetricsAddr) == "" {
			if addr, err := freeLoopbackAddr(); err != nil {
				log("cannot pick a metrics port", "rank", i, "error", err)
			} else {
				rf.metrics[i] = addr
				rf.state.Workers[i].Metrics = "http://" + addr + workerenv.MetricsPath
			}
		}
	}
	return rf
}

// env is what rank's process gets to serve its metrics: the same port for
// every process of the rank, so a scrape target stays put across restarts.
func (rf *runFiles) env(rank int) []string {
	if rf.metrics[rank] == "" {
		return nil
	}
	return []string{workerenv.MetricsAddr + "=" + rf.metrics[rank]}
}

// metricsURLs are the URLs the ranks serve /metrics at, by rank.
func (rf *runFiles) metricsURLs() []string {
	urls := make([]string, len(rf.state.Workers))
	for i, w := range rf.state.Workers {
		urls[i] = w.Metrics
	}
	return urls
}

// setsMetrics reports whether env (the run's own variables) chooses the
// metrics address itself ("off", say): the launcher then leaves it, as it
// does one set in its own environment.
func setsMetrics(env []string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, workerenv.MetricsAddr+"=") {
			return true
		}
	}
	return false
}

// freeLoopbackAddr is a loopback address with a port free a moment ago.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// started and ended update rank's entry; the caller holds the gang's mu.
func (rf *runFiles) started(rank, pid, restarts int) {
	w := &rf.state.Workers[rank]
	w.PID, w.Running, w.ExitCode, w.Signal, w.Restarts, w.Started = pid, true, 0, "", restarts, time.Now().UTC()
	rf.save()
}

func (rf *runFiles) ended(r RankOutcome, totalRestarts int) {
	w := &rf.state.Workers[r.Rank]
	w.Running, w.ExitCode, w.Signal = false, r.ExitCode, r.Signal
	rf.state.Restarts = totalRestarts
	rf.save()
}

// finish records how the run ended and closes the logs.
func (rf *runFiles) finish(out *Outcome, stopped bool) {
	switch {
	case stopped:
		rf.state.Phase = PhaseStopped
	case out.Failed():
		rf.state.Phase = PhaseFailed
		if f := out.Failures(); len(f) > 0 {
			rf.state.Failure = fmt.Sprintf("rank %d: %s", f[0].Rank, f[0].Message())
		}
		if out.BudgetExhausted != "" {
			rf.state.Failure = out.BudgetExhausted
		}
	default:
		rf.state.Phase = PhaseComplete
	}
	rf.state.Restarts = out.FailuresUsed // the gang's, as its workers count them
	rf.save()
	for _, l := range rf.logs {
		if l != nil {
			l.Close()
		}
	}
}

func (rf *runFiles) save() {
	if rf.dir == "" {
		return
	}
	rf.state.Updated = time.Now().UTC()
	_ = writeState(rf.dir, rf.state) // best effort: status then shows less
}
