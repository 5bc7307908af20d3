package consulstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
)

// An agent over its per-client connection limit answers 429 and does
// nothing; the store's client tries again after a pause, so every kind of
// call (and a whole rendezvous) gets through a burst of refusals.
func TestPushbackRetried(t *testing.T) {
	fake, cfg := wallFake(t)
	client, _, err := consulstore.NewClient(fake.Addr())
	must.NoError(t, err)
	cfg.Client = client
	st := newStore(t, cfg)
	ctx := ctxFor(t, 30*time.Second)

	calls := []struct {
		name string
		call func() error
	}{
		{"compare-and-set", func() error { _, _, err := st.CompareAndSet(ctx, "k", []byte("v"), 0); return err }},
		{"get", func() error { _, err := st.Get(ctx, "k"); return err }},
		{"list", func() error { _, _, err := st.List(ctx, ""); return err }},
		{"grant", func() error { _, err := st.Grant(ctx, time.Second); return err }},
		{"txn", func() error {
			_, err := st.Txn(ctx, []rendezvous.TxnOp{{Kind: rendezvous.TxnList, Key: ""}})
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			before := fake.Requests.Load()
			fake.TooMany.Store(4)
			must.NoError(t, c.call())
			must.Eq(t, int64(0), fake.TooMany.Load(), must.Sprint("the refusals were not all met"))
			must.GreaterEq(t, int64(5), fake.Requests.Load()-before)
		})
	}

	t.Run("a rendezvous through a burst of refusals", func(t *testing.T) {
		fake.TooMany.Store(40)
		const n = 4
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				s, err := rendezvous.Join(ctx, st, "burst", rendezvous.Member{ID: fmt.Sprintf("m%d", i), RankHint: i}, rendezvous.Fixed(n),
					rendezvous.Options{LeaseTTL: time.Second})
				if err == nil {
					defer s.Leave(context.Background())
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for _, err := range errs {
			must.NoError(t, err)
		}
	})

	t.Run("refusals past the request's deadline fail the call", func(t *testing.T) {
		fake.TooMany.Store(1 << 30)
		defer fake.TooMany.Store(0)
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := st.Get(short, "k")
		must.Error(t, err)
	})
}

func TestPushedBack(t *testing.T) {
	for code, want := range map[int]bool{429: true, 503: true, 500: false, 409: false, 200: false} {
		must.Eq(t, want, consulstore.PushedBack(code), must.Sprint(code))
	}
}
