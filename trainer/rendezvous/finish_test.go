package rendezvous

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestCheckFinished(t *testing.T) {
	a := Assignment{Generation: 3, Peers: []Member{{ID: "a"}, {ID: "b"}}}
	kv := func(k string) KeyValue { return KeyValue{Key: "r/gen/" + k, Version: 1} }
	cases := []struct {
		name string
		kvs  []KeyValue
		done bool
		lost string
	}{
		{"both alive, none done", []KeyValue{kv("3/alive/a"), kv("3/alive/b")}, false, ""},
		{"one done, other alive", []KeyValue{kv("3/done/a"), kv("3/alive/b")}, false, ""},
		{"done members may have left", []KeyValue{kv("3/done/a"), kv("3/done/b")}, true, ""},
		{"gone without being done", []KeyValue{kv("3/done/a")}, false, "b"},
		{"another generation's keys do not count", []KeyValue{kv("2/done/a"), kv("2/done/b"), kv("3/alive/a"), kv("3/alive/b")}, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			done, lost := CheckFinished("r", a, tc.kvs)
			must.Eq(t, tc.done, done)
			must.Eq(t, tc.lost, lost)
		})
	}
}

// Members that finish at different times all return, whatever the order in
// which they leave; a member that dies unfinished is reported.
func TestFinish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := NewMemStore(nil)
	sessions := make([]*Session, 3)
	errs := make(chan error, 3)
	for i := range sessions {
		go func() {
			s, err := Join(ctx, st, "run", Member{ID: string(rune('a' + i)), RankHint: i}, Fixed(3), Options{})
			sessions[i] = s
			errs <- err
		}()
	}
	for range sessions {
		must.NoError(t, <-errs)
	}
	for i, s := range sessions {
		go func() {
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			err := s.Finish(ctx)
			s.Leave(ctx) // the first to finish leaves while the others still wait
			errs <- err
		}()
	}
	for range sessions {
		must.NoError(t, <-errs)
	}

	// A new generation in which "c" dies before finishing.
	for i := range sessions {
		go func() {
			s, err := Join(ctx, st, "run", Member{ID: string(rune('a' + i)), RankHint: i}, Fixed(3), Options{})
			sessions[i] = s
			errs <- err
		}()
	}
	for range sessions {
		must.NoError(t, <-errs)
	}
	go func() { errs <- sessions[0].Finish(ctx) }()
	must.NoError(t, sessions[2].Leave(ctx))
	var lost *LostError
	must.True(t, errors.As(<-errs, &lost))
	must.Eq(t, "c", lost.Event.Member)
}
