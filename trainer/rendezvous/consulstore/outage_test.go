package consulstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
)

// outageGang joins n members, each with its own store on the fake agent,
// and starts their loss watches.
func outageGang(t *testing.T, ctx context.Context, cfg consulstore.Config, n int, opts rendezvous.Options) ([]*rendezvous.Session, []<-chan rendezvous.LostEvent) {
	t.Helper()
	ss := make([]*rendezvous.Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		st := newStore(t, cfg)
		wg.Go(func() {
			me := rendezvous.Member{ID: fmt.Sprintf("w%d", i), Node: "n", RankHint: i}
			ss[i], errs[i] = rendezvous.Join(ctx, st, "run", me, rendezvous.Fixed(n), opts)
		})
	}
	wg.Wait()
	watches := make([]<-chan rendezvous.LostEvent, n)
	for i := range n {
		must.NoError(t, errs[i])
		t.Cleanup(func() { ss[i].Leave(context.Background()) })
		watches[i] = ss[i].WatchLoss(ctx)
	}
	return ss, watches
}

// whole reports whether the agent holds the generation's state and every
// member's alive key.
func whole(fake *fakeconsul.Server, cfg consulstore.Config, gen uint64, n int) bool {
	st, err := consulstore.New(cfg)
	if err != nil {
		return false
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	kvs, _, err := st.List(ctx, "run/")
	if err != nil {
		return false
	}
	alive := 0
	state := false
	for _, kv := range kvs {
		switch kv.Key {
		case "run/state":
			state = true
		case fmt.Sprintf("run/gen/%d/alive/w0", gen), fmt.Sprintf("run/gen/%d/alive/w1", gen), fmt.Sprintf("run/gen/%d/alive/w2", gen):
			alive++
		}
	}
	return state && alive == n
}

// The agent restarts empty (a dev agent: no sessions, no keys, indexes low
// again) under a complete generation: no member reports a loss; each puts
// back its lease and alive key, and the state; the Restore hook runs; and
// a later real loss is still seen and a later rendezvous still works,
// continuing the generation numbers.
func TestOutageRiddenOut(t *testing.T) {
	fake, cfg := wallFake(t)
	ctx := ctxFor(t, 60*time.Second)
	var mu sync.Mutex
	restored := 0
	logs := &syncBuffer{}
	opts := rendezvous.Options{LeaseTTL: 200 * time.Millisecond, OutageGrace: 30 * time.Second,
		Logger:  hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}),
		Restore: func(context.Context) error { mu.Lock(); restored++; mu.Unlock(); return nil }}
	ss, watches := outageGang(t, ctx, cfg, 3, opts)
	gen := ss[0].Assignment().Generation

	fake.Stop()
	// Longer than the lease's TTL: the sessions would have expired anyway.
	time.Sleep(time.Second)
	must.NoError(t, fake.Start())
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return whole(fake, cfg, gen, 3) }),
		must.Sprint("the generation's keys did not come back"))
	for i, w := range watches {
		select {
		case ev := <-w:
			t.Fatalf("member %d reported %v", i, ev)
		default:
		}
	}
	mu.Lock()
	must.Positive(t, restored, must.Sprint("the Restore hook did not run"))
	mu.Unlock()
	// Every member saw the generation whole again (a member that did not
	// yet would take the next loss for a key not yet put back).
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return logs.count("rendezvous store back") == 3 }),
		must.Sprint(logs.String()))

	// A real loss after the outage is a loss again, at once.
	must.NoError(t, ss[2].Leave(ctx))
	for _, w := range watches[:2] {
		select {
		case ev := <-w:
			must.Eq(t, rendezvous.ReasonMemberLost, ev.Reason, must.Sprint(ev))
			must.Eq(t, "w2", ev.Member)
		case <-ctx.Done():
			t.Fatal("loss after the outage not observed")
		}
	}
	// And the next rendezvous follows on from the restored state.
	for _, s := range ss[:2] {
		must.NoError(t, s.Leave(ctx))
	}
	again, _ := outageGang(t, ctx, cfg, 3, opts)
	must.Eq(t, gen+1, again[0].Assignment().Generation)
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) count(s string) int { return strings.Count(b.String(), s) }

// An outage longer than the grace is reported, naming the store's trouble.
func TestOutageLongerThanGrace(t *testing.T) {
	fake, cfg := wallFake(t)
	cfg.ErrorGrace = 200 * time.Millisecond
	ctx := ctxFor(t, 60*time.Second)
	const grace = 2 * time.Second
	_, watches := outageGang(t, ctx, cfg, 2, rendezvous.Options{LeaseTTL: 200 * time.Millisecond, OutageGrace: grace})
	fake.Stop()
	stopped := time.Now()
	for _, w := range watches {
		select {
		case ev := <-w:
			must.Eq(t, rendezvous.ReasonStoreError, ev.Reason, must.Sprint(ev))
			must.StrContains(t, ev.Err.Error(), "longer than the outage grace (2s)")
			must.StrContains(t, ev.Err.Error(), "consul")
		case <-ctx.Done():
			t.Fatal("an outage longer than the grace was not reported")
		}
	}
	must.GreaterEq(t, grace, time.Since(stopped), must.Sprint("reported before the grace was over"))
}
