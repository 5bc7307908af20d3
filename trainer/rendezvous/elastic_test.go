package rendezvous_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// elastic is a joining generation of an elastic gang of min..max that
// follows the generation of the members named by prev.
func elastic(gen uint64, min, max int, prev []string, ps ...rendezvous.Participant) *rendezvous.State {
	return &rendezvous.State{Generation: gen, Phase: rendezvous.PhaseJoining, WorldSize: max, MinSize: min, Members: ps, Prev: prev}
}

// erecs are join records asking for min..max.
func erecs(min, max int, ps ...rendezvous.Participant) []rendezvous.Joiner {
	out := recs(max, ps...)
	for i := range out {
		out[i].MinSize = min
	}
	return out
}

// lostRec is x's join record, having seen the members lost named.
func lostRec(min, max int, x rendezvous.Participant, lost ...string) rendezvous.Joiner {
	j := erecs(min, max, x)[0]
	j.Lost = lost
	return j
}

// settled is v after the settle time with the minimum listed.
func settled(v rendezvous.View) rendezvous.View {
	v.Settled = true
	return v
}

// Decide for an elastic gang (num_workers = [2, 4]): it starts with its
// minimum after the settle time, shrinks to the survivors of a loss while
// they are at least the minimum, waits below it, and grows when a late
// member opens the next generation.
func TestDecideElastic(t *testing.T) {
	a1, b1, c1, d1, e1 := p("a", "1"), p("b", "1"), p("c", "1"), p("d", "1"), p("e", "1")
	a2, b2, c2 := p("a", "2"), p("b", "2"), p("c", "2")
	size := rendezvous.Size{Min: 2, Max: 4}
	abcd, abc := []string{"a", "b", "c", "d"}, []string{"a", "b", "c"}
	cases := []struct {
		name string
		view rendezvous.View
		me   rendezvous.Participant
		want rendezvous.Decision
	}{
		{"start: below the minimum, waits", view(nil, 1, erecs(2, 4, a1)), a1,
			rendezvous.Decision{Action: rendezvous.ActionWait}},
		{"start: at the minimum, not yet settled, waits for more", view(nil, 1, erecs(2, 4, a1, b1)), a1,
			rendezvous.Decision{Action: rendezvous.ActionWait}},
		{"start: at the minimum after the settle time, completes with them", settled(view(nil, 1, erecs(2, 4, b1, a1))), a1,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(1, b1, a1)}},
		{"start: three of four after settling, completes at three", settled(view(nil, 1, erecs(2, 4, a1, b1, c1))), c1,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(1, a1, b1, c1)}},
		{"start: the maximum completes at once, unsettled", view(nil, 1, erecs(2, 4, a1, b1, c1, d1)), b1,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(1, a1, b1, c1, d1)}},
		{"start: one too many, the first four", view(nil, 1, erecs(2, 4, a1, b1, e1, c1, d1)), b1,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(1, a1, b1, e1, c1)}},
		// d was lost from generation 3 (a, b, c, d): the survivors rejoin.
		{"loss: a survivor opens the next generation", rendezvous.View{State: complete(3, a1, b1, c1, d1)}, a2,
			rendezvous.Decision{Action: rendezvous.ActionJoin, Generation: 4, Open: true, Next: *elastic(4, 2, 4, abcd, a2)}},
		{"loss to >= min: the survivors go on at three after settling, no replacement awaited",
			settled(view(elastic(4, 2, 4, abcd, a2), 4, erecs(2, 4, a2, b2, c2))), b2,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(4, a2, b2, c2)}},
		{"loss: survivors who saw d lost go on at three at once, unsettled",
			view(elastic(4, 2, 4, abcd, a2), 4, append(erecs(2, 4, a2, b2), lostRec(2, 4, c2, "d"))), b2,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(4, a2, b2, c2)}},
		{"loss: one survivor not yet back, unsettled: wait for it",
			view(elastic(4, 2, 4, abcd, a2), 4, append(erecs(2, 4, a2), lostRec(2, 4, c2, "d"))), c2,
			rendezvous.Decision{Action: rendezvous.ActionWait}},
		{"loss below min: one survivor waits, settled or not",
			settled(view(elastic(4, 2, 4, abcd, a2), 4, erecs(2, 4, a2))), a2,
			rendezvous.Decision{Action: rendezvous.ActionWait}},
		{"loss below min: the replacement makes the minimum",
			settled(view(elastic(4, 2, 4, abcd, a2), 4, erecs(2, 4, a2, d1))), d1,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(4, a2, d1)}},
		// Generation 4 runs at three (a, b, c); d's replacement comes late.
		{"late join: the newcomer opens the next generation", rendezvous.View{State: complete(4, a2, b2, c2)}, d1,
			rendezvous.Decision{Action: rendezvous.ActionJoin, Generation: 5, Open: true, Next: *elastic(5, 2, 4, abc, d1)}},
		{"late join: the gang, at its checkpoint, rejoins and grows to four at once",
			view(elastic(5, 2, 4, abc, d1), 5, erecs(2, 4, d1, a2, c2, b2)), c2,
			rendezvous.Decision{Action: rendezvous.ActionWrite, Next: *complete(5, d1, a2, c2, b2)}},
		{"late join: newcomers alone do not start a second gang beside the one training",
			settled(view(elastic(5, 2, 4, abc, d1), 5, erecs(2, 4, d1, e1))), e1,
			rendezvous.Decision{Action: rendezvous.ActionWait}},
		{"late join: a gang of a fixed size is another size",
			view(elastic(5, 2, 4, abc, d1), 5, append(erecs(2, 4, d1), recs(4, a2)...)), d1,
			rendezvous.Decision{Action: rendezvous.ActionWait}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := rendezvous.Decide(tc.view, tc.me, size)
			must.NoError(t, err)
			must.Eq(t, tc.want, d)
		})
	}
}

func TestDecideElasticSizeErrors(t *testing.T) {
	a1 := p("a", "1")
	cases := []struct {
		name string
		view rendezvous.View
		size rendezvous.Size
		err  error
	}{
		{"min above max", rendezvous.View{}, rendezvous.Size{Min: 3, Max: 2}, nil},
		{"min below one", rendezvous.View{}, rendezvous.Size{Min: 0, Max: 2}, nil},
		{"joining elastic, I want fixed", rendezvous.View{State: elastic(2, 2, 4, nil)}, rendezvous.Fixed(4), rendezvous.ErrWorldSizeMismatch},
		{"joining fixed, I want elastic", rendezvous.View{State: joining(2, 4)}, rendezvous.Size{Min: 2, Max: 4}, rendezvous.ErrWorldSizeMismatch},
		{"min above the generation's max", rendezvous.View{State: &rendezvous.State{Generation: 2, Phase: rendezvous.PhaseJoining, WorldSize: 2, MinSize: 3}}, rendezvous.Size{Min: 3, Max: 2}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rendezvous.Decide(tc.view, a1, tc.size)
			must.Error(t, err)
			if tc.err != nil {
				must.ErrorIs(t, err, tc.err)
			}
		})
	}
}

// Two members of an elastic gang of 2..3 complete at two once the settle
// time has passed; a third that comes later opens the next generation,
// which the two see (WatchLoss) and join: the gang grows to three.
func TestJoinElasticStartsAtMinAndGrows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := rendezvous.NewMemStore(nil)
	size := rendezvous.Size{Min: 2, Max: 3}
	opts := rendezvous.Options{Settle: 50 * time.Millisecond}
	join := func(i int) (*rendezvous.Session, error) {
		return rendezvous.Join(ctx, st, "grow", rendezvous.Member{ID: fmt.Sprintf("m%d", i), RankHint: i}, size, opts)
	}
	first := make([]*rendezvous.Session, 2)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { first[i], errs[i] = join(i) })
	}
	wg.Wait()
	must.NoError(t, errors.Join(errs...))
	for _, s := range first {
		must.Eq(t, 2, s.Assignment().WorldSize)
		must.Eq(t, 1, s.Assignment().Generation)
	}
	// The late member opens generation 2; the two see it and rejoin.
	all := make([]*rendezvous.Session, 3)
	wg.Go(func() { all[2], errs[2] = join(2) })
	for i, s := range first {
		ev, ok := <-s.WatchLoss(ctx)
		must.True(t, ok)
		must.Eq(t, rendezvous.ReasonGenerationChanged, ev.Reason)
		s.Leave(ctx)
		wg.Go(func() { all[i], errs[i] = join(i) })
	}
	wg.Wait()
	must.NoError(t, errors.Join(errs...))
	for _, s := range all {
		must.Eq(t, 3, s.Assignment().WorldSize)
		must.Eq(t, 2, s.Assignment().Generation)
		s.Leave(ctx)
	}
}

// A member that comes to an elastic gang which then finishes its work
// (every member Finish-es) stops waiting: ErrGangFinished, not a timeout.
func TestJoinElasticGangFinishedMeanwhile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := rendezvous.NewMemStore(nil)
	size := rendezvous.Size{Min: 2, Max: 3}
	opts := rendezvous.Options{Settle: 50 * time.Millisecond}
	join := func(i int) (*rendezvous.Session, error) {
		return rendezvous.Join(ctx, st, "fin", rendezvous.Member{ID: fmt.Sprintf("m%d", i), RankHint: i}, size, opts)
	}
	gang := make([]*rendezvous.Session, 2)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { gang[i], errs[i] = join(i) })
	}
	wg.Wait()
	must.NoError(t, errors.Join(errs...))
	late := make(chan error, 1)
	go func() { _, err := join(2); late <- err }()
	for _, s := range gang {
		<-s.WatchLoss(ctx) // the late member opened the next generation
	}
	for i, s := range gang {
		wg.Go(func() { errs[i] = s.Finish(ctx) })
	}
	wg.Wait()
	must.NoError(t, errors.Join(errs...))
	must.ErrorIs(t, <-late, rendezvous.ErrGangFinished)
}
