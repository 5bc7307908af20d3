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

// recs are join records of participants asking for world.
func recs(world int, ps ...rendezvous.Participant) []rendezvous.Joiner {
	out := make([]rendezvous.Joiner, len(ps))
	for i, x := range ps {
		out[i] = rendezvous.Joiner{Participant: x, WorldSize: world}
	}
	return out
}

// view is what a participant signed in to gen knows: the state and the
// records it listed there.
func view(st *rendezvous.State, gen uint64, js []rendezvous.Joiner) rendezvous.View {
	return rendezvous.View{State: st, Signed: gen, Listed: gen, Joiners: js}
}

func TestDecide(t *testing.T) {
	a1, b1, c1, x1 := p("a", "1"), p("b", "1"), p("c", "1"), p("x", "1")
	a2 := p("a", "2")
	cases := []struct {
		name  string
		view  rendezvous.View
		me    rendezvous.Participant
		world int
		want  rendezvous.Decision
		err   error
	}{
		{"no state: sign in to generation 1", rendezvous.View{}, a1, 3,
			rendezvous.Decision{Action: rendezvous.ActionJoin, Generation: 1}, nil},
		{"no state, signed in, gang incomplete: wait", view(nil, 1, recs(3, b1, a1)), a1, 3,
			rendezvous.Decision{Action: rendezvous.ActionWait}, nil},
		{"no state, listing shows the gang: complete it", view(nil, 1, recs(3, c1, a1, b1)), a1, 3,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(1, c1, a1, b1)}, nil},
		{"no state, world of one: complete at once", view(nil, 1, recs(1, a1)), a1, 1,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(1, a1)}, nil},
		{"no state, records of another world size first", view(nil, 1, append(recs(2, x1), recs(3, a1)...)), a1, 3,
			rendezvous.Decision{}, rendezvous.ErrWorldSizeMismatch},
		{"no state, a later record of another world size does not count", view(nil, 1, append(append(recs(3, a1), recs(2, x1)...), recs(3, b1, c1)...)), b1, 3,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(1, a1, b1, c1)}, nil},
		{"joining, not signed in: sign in", rendezvous.View{State: joining(4, 3)}, b1, 3,
			rendezvous.Decision{Action: rendezvous.ActionJoin, Generation: 4}, nil},
		{"joining, signed in to an older generation: sign in", view(joining(4, 3), 3, recs(3, a1, b1, c1)), b1, 3,
			rendezvous.Decision{Action: rendezvous.ActionJoin, Generation: 4}, nil},
		{"joining, signed in, listing shows the gang: complete it", view(joining(4, 3, a1), 4, recs(3, a1, c1, b1)), b1, 3,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(4, a1, c1, b1)}, nil},
		{"joining, signed in, gang incomplete: wait", view(joining(4, 3), 4, recs(3, a1, b1)), b1, 3,
			rendezvous.Decision{Action: rendezvous.ActionWait}, nil},
		{"joining, signed in, listing of another generation: wait", rendezvous.View{State: joining(4, 3), Signed: 4, Listed: 3, Joiners: recs(3, a1, b1, c1)}, b1, 3,
			rendezvous.Decision{Action: rendezvous.ActionWait}, nil},
		{"joining, one record too many: complete with the first", view(joining(4, 2), 4, recs(2, a1, c1, b1)), b1, 2,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(4, a1, c1)}, nil},
		{"complete with me: done", rendezvous.View{State: complete(4, a1, b1)}, b1, 2,
			rendezvous.Decision{Action: rendezvous.ActionDone}, nil},
		{"complete without me: open the next generation", rendezvous.View{State: complete(4, a1, b1)}, c1, 2,
			rendezvous.Decision{Action: rendezvous.ActionJoin, Generation: 5, Open: true, Next: *joining(5, 2, c1)}, nil},
		{"complete with my older incarnation (restart): next generation", view(complete(4, a1, b1), 4, recs(2, a1, b1)), a2, 2,
			rendezvous.Decision{Action: rendezvous.ActionJoin, Generation: 5, Open: true, Next: *joining(5, 2, a2)}, nil},
		{"complete, world of one: the next generation completes at once", rendezvous.View{State: complete(4, a1)}, c1, 1,
			rendezvous.Decision{Action: rendezvous.ActionJoin, Generation: 5, Open: true, Next: *complete(5, c1)}, nil},
		{"complete, new world size: next generation at mine", rendezvous.View{State: complete(4, a1, b1)}, c1, 3,
			rendezvous.Decision{Action: rendezvous.ActionJoin, Generation: 5, Open: true, Next: *joining(5, 3, c1)}, nil},
		{"joining with another world size", rendezvous.View{State: joining(4, 3, a1)}, b1, 2,
			rendezvous.Decision{}, rendezvous.ErrWorldSizeMismatch},
		{"unknown phase", rendezvous.View{State: &rendezvous.State{Generation: 1, Phase: "weird", WorldSize: 2}}, a1, 2,
			rendezvous.Decision{}, rendezvous.ErrBadState},
		{"generation 0", rendezvous.View{State: &rendezvous.State{Generation: 0, Phase: rendezvous.PhaseJoining, WorldSize: 2}}, a1, 2,
			rendezvous.Decision{}, rendezvous.ErrBadState},
		{"too many members", rendezvous.View{State: joining(1, 1, a1, b1)}, c1, 1,
			rendezvous.Decision{}, rendezvous.ErrBadState},
		{"member twice", rendezvous.View{State: joining(1, 3, a1, a2)}, c1, 3,
			rendezvous.Decision{}, rendezvous.ErrBadState},
		{"complete without ranks", rendezvous.View{State: &rendezvous.State{Generation: 2, Phase: rendezvous.PhaseComplete, WorldSize: 1, Members: []rendezvous.Participant{a1}}}, a1, 1,
			rendezvous.Decision{}, rendezvous.ErrBadState},
		{"complete with a rank twice", rendezvous.View{State: &rendezvous.State{Generation: 2, Phase: rendezvous.PhaseComplete, WorldSize: 2, Members: []rendezvous.Participant{a1, b1}, Ranks: []string{"a", "a"}}}, a1, 2,
			rendezvous.Decision{}, rendezvous.ErrBadState},
		{"complete with an unknown rank", rendezvous.View{State: &rendezvous.State{Generation: 2, Phase: rendezvous.PhaseComplete, WorldSize: 2, Members: []rendezvous.Participant{a1, b1}, Ranks: []string{"a", "z"}}}, a1, 2,
			rendezvous.Decision{}, rendezvous.ErrBadState},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := rendezvous.Decide(tc.view, tc.me, rendezvous.Fixed(tc.world))
			if tc.err != nil {
				must.ErrorIs(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, d)
		})
	}
	_, err := rendezvous.Decide(rendezvous.View{}, a1, rendezvous.Fixed(0))
	must.Error(t, err)
}

func TestFold(t *testing.T) {
	a1, b1, c1 := p("a", "1"), p("b", "1"), p("c", "1")
	cases := []struct {
		name string
		view rendezvous.View
		me   rendezvous.Participant
		want *rendezvous.State // nil: nothing to fold
	}{
		{"smallest ID, no state: record generation 1", view(nil, 1, recs(4, b1, a1)), a1, joining(1, 4, b1, a1)},
		{"smallest ID, joining: record the new member", view(joining(3, 4, a1), 3, recs(4, a1, c1)), a1, joining(3, 4, a1, c1)},
		{"a record left: record without it", view(joining(3, 4, a1, b1), 3, recs(4, a1)), a1, joining(3, 4, a1)},
		{"already recorded", view(joining(3, 4, a1, b1), 3, recs(4, a1, b1)), a1, nil},
		{"not the smallest ID", view(nil, 1, recs(4, b1, a1)), b1, nil},
		{"the gang is whole: Decide completes it", view(nil, 1, recs(2, b1, a1)), a1, nil},
		{"not signed in", rendezvous.View{Listed: 1, Joiners: recs(4, a1)}, a1, nil},
		{"complete generation", view(complete(3, a1, b1), 3, recs(2, a1, b1)), a1, nil},
		{"nothing listed", rendezvous.View{Signed: 1}, a1, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			next, ok := rendezvous.Fold(tc.view, tc.me)
			must.Eq(t, tc.want != nil, ok)
			must.Eq(t, tc.want != nil, tc.view.Folder(tc.me) && ok)
			if tc.want != nil {
				must.Eq(t, *tc.want, next)
			}
		})
	}
}

// Decide never edits what it is given.
func TestDecideLeavesInputAlone(t *testing.T) {
	v := view(joining(4, 3, p("a", "1")), 4, recs(3, p("c", "1"), p("a", "1"), p("b", "1")))
	before := view(joining(4, 3, p("a", "1")), 4, recs(3, p("c", "1"), p("a", "1"), p("b", "1")))
	_, err := rendezvous.Decide(v, p("b", "1"), rendezvous.Fixed(3))
	must.NoError(t, err)
	must.Eq(t, before, v)
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

// A seeded model of the join loop over a store: one index for every write,
// a state register written by compare-and-set, join records per generation,
// and sign-in transactions guarded by the state's version. Members act in
// random order from possibly stale views; some restart midway (a new
// incarnation with no view; the old one's records linger, as a lease that
// has not expired yet); members of a generation that moves on join again,
// as WatchLoss makes them; a waiting folder sometimes lists and folds.
// Whatever the interleaving, the run ends in one complete generation holding
// every member's latest incarnation, with every rank once and distinct hints
// honoured.
func TestDecideRandomInterleavings(t *testing.T) {
	type record struct {
		j       rendezvous.Joiner
		version uint64
	}
	for seed := range uint64(400) {
		r := rand.New(rand.NewPCG(seed, 99))
		world := 1 + r.IntN(6)
		type member struct {
			me      rendezvous.Participant
			view    rendezvous.View
			viewVer uint64 // version of view.State
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
		var (
			index   uint64
			reg     *rendezvous.State // the state register
			ver     uint64
			records = map[uint64]map[string]record{} // generation -> member ID -> record
		)
		rejoin := func(m *member) {
			m.me.Incarnation += "+"
			m.view, m.viewVer, m.done = rendezvous.View{}, 0, false
		}
		setState := func(next rendezvous.State) {
			if reg != nil && next.Generation != reg.Generation {
				for _, o := range ms { // they see the generation move on
					if o.done {
						rejoin(o)
					}
				}
			}
			index++
			reg, ver = &next, index
		}
		list := func(g uint64) []rendezvous.Joiner {
			var rs []record
			for _, rec := range records[g] {
				rs = append(rs, rec)
			}
			slices.SortFunc(rs, func(a, b record) int { return int(a.version) - int(b.version) })
			var out []rendezvous.Joiner
			for _, rec := range rs {
				out = append(out, rec.j)
			}
			return out
		}
		current := func() uint64 { // the generation a state leaves open
			if reg == nil {
				return 1
			}
			if reg.Phase == rendezvous.PhaseJoining {
				return reg.Generation
			}
			return 0
		}
		restarts := r.IntN(3)
		for step := 0; ; step++ {
			if step > 20_000 {
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
				restarts--
				rejoin(ms[r.IntN(world)])
				continue
			}
			if r.IntN(3) == 0 { // re-read
				m.view.State, m.viewVer = reg, ver
			}
			d, err := rendezvous.Decide(m.view, m.me, rendezvous.Fixed(world))
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			switch d.Action {
			case rendezvous.ActionDone:
				m.done = true
				if m.view.State.Generation != reg.Generation {
					rejoin(m) // its watch sees the generation moved on
				}
			case rendezvous.ActionWait:
				if m.viewVer != ver {
					m.view.State, m.viewVer = reg, ver
					continue
				}
				// It would block. A folder wakes now and then: it lists,
				// and folds or, seeing the gang whole, decides again.
				if !m.view.Folder(m.me) || r.IntN(4) != 0 {
					continue
				}
				g := current()
				if g == 0 {
					continue
				}
				m.view.Listed, m.view.Joiners = g, list(g)
				if next, ok := rendezvous.Fold(m.view, m.me); ok {
					setState(next)
					m.view.State, m.viewVer = reg, ver
				}
			case rendezvous.ActionWrite:
				if m.viewVer == ver {
					setState(d.Next)
				}
				m.view.State, m.viewVer = reg, ver // the CAS answers with the current value
			case rendezvous.ActionJoin:
				if m.viewVer != ver { // the guard fails and answers with the state
					m.view.State, m.viewVer = reg, ver
					continue
				}
				if d.Open {
					setState(d.Next)
				} else {
					index++
				}
				if records[d.Generation] == nil {
					records[d.Generation] = map[string]record{}
				}
				records[d.Generation][m.me.ID] = record{rendezvous.Joiner{Participant: m.me, WorldSize: world}, index}
				m.view.Signed, m.view.Listed, m.view.Joiners = d.Generation, d.Generation, list(d.Generation)
				m.view.State, m.viewVer = reg, ver
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
