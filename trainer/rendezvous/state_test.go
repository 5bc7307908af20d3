package rendezvous_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

func p(id string, inc string) rendezvous.Participant {
	return rendezvous.Participant{Member: m(id, "n0", none), Incarnation: inc}
}

func joining(gen uint64, world int, ps ...rendezvous.Participant) *rendezvous.State {
	return &rendezvous.State{Generation: gen, Phase: rendezvous.PhaseJoining, WorldSize: world, Members: ps}
}

func complete(gen uint64, ps ...rendezvous.Participant) *rendezvous.State {
	s := &rendezvous.State{Generation: gen, Phase: rendezvous.PhaseComplete, WorldSize: len(ps), Members: ps}
	for _, x := range rendezvous.AssignRanks(membersOf(ps)) {
		s.Ranks = append(s.Ranks, x.ID)
	}
	return s
}

func membersOf(ps []rendezvous.Participant) []rendezvous.Member {
	out := make([]rendezvous.Member, len(ps))
	for i, x := range ps {
		out[i] = x.Member
	}
	return out
}

func TestDecide(t *testing.T) {
	a1, b1, c1 := p("a", "1"), p("b", "1"), p("c", "1")
	a2 := p("a", "2")
	cases := []struct {
		name   string
		cur    *rendezvous.State
		me     rendezvous.Participant
		world  int
		action rendezvous.Action
		next   *rendezvous.State // for write
		err    error
	}{
		{"no state: open generation 1", nil, a1, 3,
			rendezvous.ActionWrite, joining(1, 3, a1), nil},
		{"no state, world of one: complete at once", nil, a1, 1,
			rendezvous.ActionWrite, complete(1, a1), nil},
		{"joining without me: sign in", joining(4, 3, a1), b1, 3,
			rendezvous.ActionWrite, joining(4, 3, a1, b1), nil},
		{"last slot: complete with ranks", joining(4, 3, a1, c1), b1, 3,
			rendezvous.ActionWrite, complete(4, a1, c1, b1), nil},
		{"joining with me: wait", joining(4, 3, a1, b1), b1, 3,
			rendezvous.ActionWait, nil, nil},
		{"joining with my older incarnation: take the slot", joining(4, 3, a1, b1), a2, 3,
			rendezvous.ActionWrite, joining(4, 3, a2, b1), nil},
		{"complete with me: done", complete(4, a1, b1), b1, 2,
			rendezvous.ActionDone, nil, nil},
		{"complete without me: next generation", complete(4, a1, b1), c1, 2,
			rendezvous.ActionWrite, joining(5, 2, c1), nil},
		{"complete with my older incarnation (restart): next generation", complete(4, a1, b1), a2, 2,
			rendezvous.ActionWrite, joining(5, 2, a2), nil},
		{"complete, new world size: next generation at mine", complete(4, a1, b1), c1, 3,
			rendezvous.ActionWrite, joining(5, 3, c1), nil},
		{"joining with another world size", joining(4, 3, a1), b1, 2,
			0, nil, rendezvous.ErrWorldSizeMismatch},
		{"unknown phase", &rendezvous.State{Generation: 1, Phase: "weird", WorldSize: 2}, a1, 2,
			0, nil, rendezvous.ErrBadState},
		{"generation 0", &rendezvous.State{Generation: 0, Phase: rendezvous.PhaseJoining, WorldSize: 2}, a1, 2,
			0, nil, rendezvous.ErrBadState},
		{"too many members", joining(1, 1, a1, b1), c1, 1,
			0, nil, rendezvous.ErrBadState},
		{"member twice", joining(1, 3, a1, a2), c1, 3,
			0, nil, rendezvous.ErrBadState},
		{"complete without ranks", &rendezvous.State{Generation: 2, Phase: rendezvous.PhaseComplete, WorldSize: 1, Members: []rendezvous.Participant{a1}}, a1, 1,
			0, nil, rendezvous.ErrBadState},
		{"complete with a rank twice", &rendezvous.State{Generation: 2, Phase: rendezvous.PhaseComplete, WorldSize: 2, Members: []rendezvous.Participant{a1, b1}, Ranks: []string{"a", "a"}}, a1, 2,
			0, nil, rendezvous.ErrBadState},
		{"complete with an unknown rank", &rendezvous.State{Generation: 2, Phase: rendezvous.PhaseComplete, WorldSize: 2, Members: []rendezvous.Participant{a1, b1}, Ranks: []string{"a", "z"}}, a1, 2,
			0, nil, rendezvous.ErrBadState},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := rendezvous.Decide(tc.cur, tc.me, tc.world)
			if tc.err != nil {
				must.ErrorIs(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.action, d.Action)
			if tc.next != nil {
				must.Eq(t, *tc.next, d.Next)
			}
		})
	}
	_, err := rendezvous.Decide(nil, a1, 0)
	must.Error(t, err)
}

// Decide never edits the state it is given.
func TestDecideLeavesInputAlone(t *testing.T) {
	cur := joining(4, 3, p("a", "1"), p("c", "1"))
	before := *joining(4, 3, p("a", "1"), p("c", "1"))
	_, err := rendezvous.Decide(cur, p("b", "1"), 3)
	must.NoError(t, err)
	must.Eq(t, before, *cur)
}

// Members signing in in any order, each racing from a stale copy, end in one
// complete generation: a sequential model of the CAS loop.
func TestDecideConverges(t *testing.T) {
	ps := []rendezvous.Participant{p("d", "1"), p("b", "1"), p("a", "1"), p("c", "1")}
	var cur *rendezvous.State
	for _, me := range ps {
		d, err := rendezvous.Decide(cur, me, len(ps))
		must.NoError(t, err)
		must.Eq(t, rendezvous.ActionWrite, d.Action)
		next := d.Next
		cur = &next
	}
	must.Eq(t, rendezvous.PhaseComplete, cur.Phase)
	must.Eq(t, []string{"a", "b", "c", "d"}, cur.Ranks)
	for _, me := range ps {
		d, err := rendezvous.Decide(cur, me, len(ps))
		must.NoError(t, err)
		must.Eq(t, rendezvous.ActionDone, d.Action)
	}
}

func TestWithdraw(t *testing.T) {
	a1, b1 := p("a", "1"), p("b", "1")
	cases := []struct {
		name string
		cur  *rendezvous.State
		me   rendezvous.Participant
		next *rendezvous.State // nil: nothing to withdraw
	}{
		{"joining with me", joining(2, 3, a1, b1), a1, joining(2, 3, b1)},
		{"joining without me", joining(2, 3, b1), a1, nil},
		{"joining with another incarnation of me", joining(2, 3, p("a", "9")), a1, nil},
		{"complete", complete(2, a1, b1), a1, nil},
		{"no state", nil, a1, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			next, ok := rendezvous.Withdraw(tc.cur, tc.me)
			must.Eq(t, tc.next != nil, ok)
			if tc.next != nil {
				must.Eq(t, *tc.next, next)
			}
		})
	}
}

func TestCheckLoss(t *testing.T) {
	peers := []rendezvous.Member{m("a", "n0", none), m("b", "n0", none)}
	a := rendezvous.Assignment{Generation: 3, Rank: 0, WorldSize: 2, Peers: peers}
	state := func(gen uint64) rendezvous.KeyValue {
		return rendezvous.KeyValue{Key: "run/state", Data: []byte(`{"generation":` + string(rune('0'+gen)) + `}`), Version: 9}
	}
	alive := func(gen, id string) rendezvous.KeyValue {
		return rendezvous.KeyValue{Key: "run/gen/" + gen + "/alive/" + id, Data: []byte("{}"), Version: 5}
	}
	cases := []struct {
		name   string
		kvs    []rendezvous.KeyValue
		lost   bool
		reason rendezvous.LossReason
		member string
		newGen uint64
		miss   []string
	}{
		{"whole", []rendezvous.KeyValue{alive("3", "a"), alive("3", "b"), state(3)}, false, "", "", 0, nil},
		{"whole with stale keys of other generations", []rendezvous.KeyValue{alive("2", "x"), alive("3", "a"), alive("3", "b"), alive("30", "z"), state(3)}, false, "", "", 0, nil},
		{"member gone", []rendezvous.KeyValue{alive("3", "a"), state(3)}, true, rendezvous.ReasonMemberLost, "b", 0, []string{"b"}},
		{"all gone", []rendezvous.KeyValue{state(3)}, true, rendezvous.ReasonMemberLost, "a", 0, []string{"a", "b"}},
		{"member alive only in another generation", []rendezvous.KeyValue{alive("3", "a"), alive("31", "b"), state(3)}, true, rendezvous.ReasonMemberLost, "b", 0, []string{"b"}},
		{"generation moved on", []rendezvous.KeyValue{alive("3", "a"), alive("3", "b"), state(4)}, true, rendezvous.ReasonGenerationChanged, "", 4, nil},
		{"state deleted", []rendezvous.KeyValue{alive("3", "a"), alive("3", "b")}, true, rendezvous.ReasonGenerationChanged, "", 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev, lost := rendezvous.CheckLoss("run", a, tc.kvs)
			must.Eq(t, tc.lost, lost)
			if lost {
				must.Eq(t, tc.reason, ev.Reason)
				must.Eq(t, tc.member, ev.Member)
				must.Eq(t, tc.newGen, ev.NewGeneration)
				must.Eq(t, tc.miss, ev.Missing)
				must.Eq(t, 3, ev.Generation)
			}
		})
	}
}

// A seeded model of the join loop over a compare-and-set register: members
// act in random order from possibly stale views; some restart midway (a new
// incarnation with no view), and members of a generation that moves on join
// again, as WatchLoss makes them. Whatever the interleaving, the run ends in
// one complete generation holding every member's latest incarnation, with
// every rank once and distinct hints honoured.
func TestDecideRandomInterleavings(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 99))
		world := 1 + r.IntN(6)
		type member struct {
			me      rendezvous.Participant
			view    *rendezvous.State // what it last read
			viewVer uint64
			done    bool
		}
		ms := make([]*member, world)
		hinted := map[int]bool{}
		for i := range ms {
			hint := none
			if h := r.IntN(world + 2); h < world && !hinted[h] && r.IntN(2) == 0 {
				hint, hinted[h] = h, true
			}
			ms[i] = &member{me: rendezvous.Participant{
				Member:      rendezvous.Member{ID: fmt.Sprintf("m%d", i), Node: fmt.Sprintf("n%d", r.IntN(2)), RankHint: hint},
				Incarnation: "1",
			}}
		}
		var reg *rendezvous.State // the register
		var ver uint64
		restarts := r.IntN(3)
		for step := 0; ; step++ {
			if step > 10_000 {
				for _, m := range ms {
					t.Logf("%s inc %s done %v view %+v", m.me.ID, m.me.Incarnation, m.done, m.view)
				}
				t.Fatalf("seed %d: no convergence; register %+v", seed, reg)
			}
			var active []*member
			for _, m := range ms {
				if !m.done {
					active = append(active, m)
				}
			}
			if len(active) == 0 {
				break
			}
			m := active[r.IntN(len(active))]
			if restarts > 0 && r.IntN(20) == 0 {
				// Some member restarts and joins again as a new
				// incarnation from scratch.
				restarts--
				victim := ms[r.IntN(world)]
				victim.me.Incarnation += "'"
				victim.view, victim.viewVer, victim.done = nil, 0, false
				continue
			}
			if r.IntN(3) == 0 { // re-read
				m.view, m.viewVer = reg, ver
			}
			d, err := rendezvous.Decide(m.view, m.me, world)
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			switch d.Action {
			case rendezvous.ActionDone:
				m.done = true
				if m.view.Generation != reg.Generation {
					// Its watch starts from the current state, sees the
					// generation moved on and joins again.
					m.me.Incarnation += "+"
					m.done = false
				}
			case rendezvous.ActionWait:
				if m.viewVer == ver {
					continue // it would block; someone else moves
				}
				m.view, m.viewVer = reg, ver
			case rendezvous.ActionWrite:
				if m.viewVer == ver { // CAS succeeds
					next := d.Next
					if reg != nil && next.Generation != reg.Generation {
						// The members done with the old generation see
						// it move on (WatchLoss) and join again.
						for _, o := range ms {
							if o.done {
								o.me.Incarnation += "+"
								o.done = false
							}
						}
					}
					reg, ver = &next, ver+1
				}
				m.view, m.viewVer = reg, ver // the CAS answers with the current value
			}
		}
		must.Eq(t, rendezvous.PhaseComplete, reg.Phase, must.Sprintf("seed %d", seed))
		peers, err := reg.Peers()
		must.NoError(t, err)
		must.Len(t, world, peers)
		for _, m := range ms {
			i := slices.IndexFunc(reg.Members, func(p rendezvous.Participant) bool { return p.ID == m.me.ID })
			must.NonNegative(t, i, must.Sprintf("seed %d: %s missing", seed, m.me.ID))
			must.Eq(t, m.me, reg.Members[i], must.Sprintf("seed %d: stale incarnation", seed))
			if h := m.me.RankHint; h >= 0 {
				must.Eq(t, m.me.ID, peers[h].ID, must.Sprintf("seed %d: hint %d", seed, h))
			}
		}
	}
}
