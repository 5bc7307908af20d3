package launch

import (
	"context"
	"encoding/json"
	"syscall"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// watchRejoin kills a worker that stays out of a re-forming gang for
// RejoinTimeout while its process runs: it is frozen (SIGSTOP, a stuck
// kernel call) or stuck in its own code, its peers have given up on it, and
// only a replacement can fill its place. Its death then counts against the
// failure budget like any other.
func (g *gang) watchRejoin(ctx context.Context) {
	tick := time.NewTicker(min(max(g.opts.RejoinTimeout/10, 20*time.Millisecond), time.Second))
	defer tick.Stop()
	var forming uint64 // the generation seen forming
	var since time.Time
	var training map[string]bool // members of the last complete generation seen
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			st, ok := g.state()
			if ok && st.Phase == rendezvous.PhaseComplete {
				training = map[string]bool{}
				for _, id := range st.Ranks {
					training[id] = true
				}
			}
			if !ok || st.Phase != rendezvous.PhaseJoining {
				forming = 0
				continue
			}
			if st.Generation != forming {
				forming, since = st.Generation, now
				continue
			}
			if now.Sub(since) < g.opts.RejoinTimeout {
				continue
			}
			joined := map[string]bool{}
			for _, m := range st.Members {
				joined[m.ID] = true
			}
			g.mu.Lock()
			for i, cmd := range g.procs {
				// An elastic gang that a newcomer grows trains on to its
				// next checkpoint before it joins (see trainer/elastic.go).
				growing := len(st.Members) > 0 && !training[st.Members[0].ID] && st.MinSize > 0
				if growing && training[memberID(i)] {
					continue
				}
				if g.ended[i].Order < 0 && !joined[memberID(i)] && now.Sub(g.started[i]) > g.opts.RejoinTimeout {
					g.stderr.printf("==> rank %d did not rejoin generation %d within %v: presumed hung, killing it\n",
						i, st.Generation, g.opts.RejoinTimeout)
					syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				}
			}
			g.mu.Unlock()
			since = now
		}
	}
}

// state reads the run's rendezvous state document.
func (g *gang) state() (rendezvous.State, bool) {
	var st rendezvous.State
	v, err := g.store.Get(context.Background(), rendezvous.StateKey(g.opts.Name))
	if err != nil || v.Version == 0 || json.Unmarshal(v.Data, &st) != nil {
		return st, false
	}
	return st, true
}
