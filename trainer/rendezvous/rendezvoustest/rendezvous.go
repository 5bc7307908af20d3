package rendezvoustest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// Gang is a set of members to join, each with its own store handle.
type gang struct {
	t       *testing.T
	f       Fixture
	run     string
	world   int
	timeout time.Duration
}

func newGang(t *testing.T, f Fixture, world int) *gang {
	return &gang{t: t, f: f, run: keyspace(t), world: world, timeout: 30 * time.Second}
}

func (g *gang) opts() rendezvous.Options {
	return rendezvous.Options{Timeout: g.timeout, LeaseTTL: g.f.ttl()}
}

type joined struct {
	s   *rendezvous.Session
	err error
}

// start joins m in a goroutine on a fresh store handle.
func (g *gang) start(ctx context.Context, m rendezvous.Member) <-chan joined {
	st := connect(g.t, g.f)
	ch := make(chan joined, 1)
	go func() {
		s, err := rendezvous.Join(ctx, st, g.run, m, rendezvous.Fixed(g.world), g.opts())
		if s != nil {
			g.t.Cleanup(func() { s.Leave(context.Background()) })
		}
		ch <- joined{s, err}
	}()
	return ch
}

// joinAll joins every member concurrently and returns their sessions in
// member order.
func (g *gang) joinAll(members []rendezvous.Member) []*rendezvous.Session {
	g.t.Helper()
	ctx := testCtx(g.t, g.timeout+10*time.Second)
	chs := make([]<-chan joined, len(members))
	for i, m := range members {
		chs[i] = g.start(ctx, m)
	}
	return collect(g.t, chs)
}

func collect(t *testing.T, chs []<-chan joined) []*rendezvous.Session {
	t.Helper()
	out := make([]*rendezvous.Session, len(chs))
	for i, ch := range chs {
		j := <-ch
		must.NoError(t, j.err)
		out[i] = j.s
	}
	return out
}

func members(n int, nodes int, hints bool) []rendezvous.Member {
	out := make([]rendezvous.Member, n)
	for i := range out {
		out[i] = rendezvous.Member{
			ID:       fmt.Sprintf("m%d", i),
			Node:     fmt.Sprintf("node%d", i%nodes),
			Addr:     fmt.Sprintf("10.0.0.%d:%d", i%nodes, 9000+i),
			RankHint: rendezvous.NoRankHint,
		}
		if hints {
			out[i].RankHint = n - 1 - i
		}
	}
	return out
}

// checkGang asserts that the sessions of members form one consistent
// generation: every rank once, the same peers everywhere, local and node
// ranks that agree with the peers.
func checkGang(t *testing.T, ms []rendezvous.Member, ss []*rendezvous.Session) rendezvous.Assignment {
	t.Helper()
	first := ss[0].Assignment()
	seen := make(map[int]string)
	for i, s := range ss {
		a := s.Assignment()
		must.Eq(t, first.Generation, a.Generation)
		must.Eq(t, len(ms), a.WorldSize)
		must.Eq(t, first.Peers, a.Peers, must.Sprintf("member %s sees other peers", ms[i].ID))
		must.Between(t, 0, a.Rank, len(ms)-1)
		if other, dup := seen[a.Rank]; dup {
			t.Fatalf("rank %d given to %s and %s", a.Rank, other, ms[i].ID)
		}
		seen[a.Rank] = ms[i].ID
		must.Eq(t, ms[i], a.Peers[a.Rank], must.Sprint("peer at my rank is not me"))

		var local []int
		for r, p := range a.Peers {
			if p.Node == ms[i].Node {
				local = append(local, r)
			}
		}
		must.Eq(t, len(local), a.LocalWorldSize)
		must.Eq(t, a.Rank, local[a.LocalRank])
		must.Between(t, 0, a.NodeRank, a.NumNodes-1)
	}
	// Node ranks: nodes ordered by their smallest rank.
	nodeOf := make(map[string]int)
	for _, s := range ss {
		a := s.Assignment()
		nodeOf[a.Peers[a.Rank].Node] = a.NodeRank
	}
	var order []string
	for _, p := range first.Peers {
		if len(order) == 0 || !contains(order, p.Node) {
			order = append(order, p.Node)
		}
	}
	for i, n := range order {
		must.Eq(t, i, nodeOf[n], must.Sprintf("node rank of %s", n))
	}
	return first
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// nextEvent waits for one LostEvent.
func nextEvent(t *testing.T, ch <-chan rendezvous.LostEvent, within time.Duration) rendezvous.LostEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch ended without an event")
		}
		return ev
	case <-time.After(within):
		t.Fatalf("no loss observed within %v", within)
	}
	return rendezvous.LostEvent{}
}

// RunRendezvousConformance checks the rendezvous algorithm over the store
// newFixture returns: ranks, hints, late joins, loss, generations, timeouts.
func RunRendezvousConformance(t *testing.T, newFixture func(t *testing.T) Fixture) {
	t.Run("ranks 0..N-1 once with consistent peers", func(t *testing.T) {
		for _, n := range []int{1, 2, 4} {
			t.Run(fmt.Sprint(n), func(t *testing.T) {
				ms := members(n, 2, false)
				ss := newGang(t, newFixture(t), n).joinAll(ms)
				a := checkGang(t, ms, ss)
				must.Positive(t, a.Generation)
			})
		}
	})

	t.Run("rank hints honoured", func(t *testing.T) {
		ms := members(4, 2, true)
		ss := newGang(t, newFixture(t), 4).joinAll(ms)
		checkGang(t, ms, ss)
		for i, s := range ss {
			must.Eq(t, ms[i].RankHint, s.Assignment().Rank)
		}
	})

	t.Run("late join completes the gang", func(t *testing.T) {
		ms := members(4, 1, false)
		g := newGang(t, newFixture(t), 4)
		ctx := testCtx(t, g.timeout)
		early := make([]<-chan joined, 3)
		for i := range early {
			early[i] = g.start(ctx, ms[i])
		}
		select {
		case j := <-early[0]:
			t.Fatalf("join returned before the gang was complete: %v", j.err)
		case <-time.After(300 * time.Millisecond):
		}
		late := g.start(ctx, ms[3])
		checkGang(t, ms, collect(t, append(early, late)))
	})

	t.Run("member loss observed", func(t *testing.T) {
		ms := members(3, 1, false)
		ss := newGang(t, newFixture(t), 3).joinAll(ms)
		ctx := testCtx(t, 30*time.Second)
		w0, w1 := ss[0].WatchLoss(ctx), ss[1].WatchLoss(ctx)
		must.NoError(t, ss[2].Leave(ctx))
		for _, w := range []<-chan rendezvous.LostEvent{w0, w1} {
			ev := nextEvent(t, w, 10*time.Second)
			must.Eq(t, rendezvous.ReasonMemberLost, ev.Reason)
			must.Eq(t, "m2", ev.Member)
			must.Eq(t, ss[0].Assignment().Generation, ev.Generation)
		}
	})

	t.Run("restarted member opens the next generation", func(t *testing.T) {
		ms := members(3, 1, true)
		g := newGang(t, newFixture(t), 3)
		ss := g.joinAll(ms)
		gen := checkGang(t, ms, ss).Generation
		ctx := testCtx(t, g.timeout)
		w0, w2 := ss[0].WatchLoss(ctx), ss[2].WatchLoss(ctx)

		// m1 comes back as a new process before its old lease is gone.
		again := g.start(ctx, ms[1])
		for _, w := range []<-chan rendezvous.LostEvent{w0, w2} {
			ev := nextEvent(t, w, 10*time.Second)
			must.Eq(t, rendezvous.ReasonGenerationChanged, ev.Reason)
			must.Eq(t, gen+1, ev.NewGeneration)
		}
		select {
		case j := <-again:
			t.Fatalf("restarted member completed alone: %v", j.err)
		default:
		}
		// The survivors rejoin and the gang is whole again.
		next := collect(t, []<-chan joined{g.start(ctx, ms[0]), again, g.start(ctx, ms[2])})
		a := checkGang(t, ms, next)
		must.Eq(t, gen+1, a.Generation)
		for i, s := range next {
			must.Eq(t, ms[i].RankHint, s.Assignment().Rank)
		}
	})

	t.Run("timeout names how many joined", func(t *testing.T) {
		ms := members(3, 1, false)
		g := newGang(t, newFixture(t), 3)
		g.timeout = 500 * time.Millisecond
		ctx := testCtx(t, 30*time.Second)
		chs := []<-chan joined{g.start(ctx, ms[0]), g.start(ctx, ms[1])}
		for _, ch := range chs {
			j := <-ch
			must.ErrorIs(t, j.err, rendezvous.ErrTimeout)
			var te *rendezvous.TimeoutError
			must.True(t, errors.As(j.err, &te))
			must.Eq(t, 3, te.WorldSize)
			must.Between(t, 1, te.Joined, 2)
			must.StrContains(t, j.err.Error(), "of 3 members joined")
		}
		// The timed-out members withdrew: a fresh gang of three completes.
		g.timeout = 30 * time.Second
		fresh := members(6, 1, false)[3:]
		checkGang(t, fresh, g.joinAll(fresh))
	})

	t.Run("world size mismatch refused", func(t *testing.T) {
		ms := members(2, 1, false)
		g := newGang(t, newFixture(t), 3)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		first := g.start(ctx, ms[0])
		waitForMembers(t, connect(t, g.f), g.run, 1)
		g.world = 2
		j := <-g.start(ctx, ms[1])
		must.ErrorIs(t, j.err, rendezvous.ErrWorldSizeMismatch)
		cancel()
		j = <-first
		must.ErrorIs(t, j.err, context.Canceled)
	})
}

// waitForMembers blocks until the run's joining generation has n members.
func waitForMembers(t *testing.T, st rendezvous.Store, run string, n int) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	var v rendezvous.Value
	for {
		var err error
		v, err = st.Wait(ctx, rendezvous.StateKey(run), v.Version)
		must.NoError(t, err)
		var s rendezvous.State
		if v.Version != 0 && json.Unmarshal(v.Data, &s) == nil && len(s.Members) >= n {
			return
		}
	}
}
