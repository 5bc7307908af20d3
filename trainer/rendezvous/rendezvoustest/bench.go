package rendezvoustest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// B4Target is a store under benchmark B4.
type B4Target struct {
	// Open returns a new client of the store with its own connection, as
	// a starting worker would make.
	Open func(ctx context.Context) (rendezvous.Store, error)
	// Connect makes the reference's one connect to the store's server and
	// closes it.
	Connect func(ctx context.Context) error
}

// RunB4 is benchmark B4 for one store: for 2 and 4 workers it times a
// whole rendezvous (each worker opening its client and joining at the same
// instant) against the reference N·(one store round trip) + (one connect),
// both measured in the same run, and reports "rdzv/(N*rtt+connect)" over
// medians: on a shared machine a few iterations stall on the scheduler, and
// a mean would measure the machine's load.
func RunB4(b *testing.B, t B4Target) {
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			ctx := context.Background()
			probe, err := t.Open(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer probe.Close()
			clients := make([]rendezvous.Store, n) // for the overlap figure
			for i := range clients {
				if clients[i], err = t.Open(ctx); err != nil {
					b.Fatal(err)
				}
				defer clients[i].Close()
			}
			var rdzv, rtt, connect, overlap []time.Duration
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				if err := t.Connect(ctx); err != nil {
					b.Fatal(err)
				}
				connect = append(connect, time.Since(start))
				rtt = append(rtt, timeRoundTrip(b, ctx, probe, 20))
				overlap = append(overlap, timeConcurrentRoundTrip(b, ctx, clients))
				rdzv = append(rdzv, timeRendezvous(b, ctx, t, fmt.Sprintf("bench-%d-%d-%d", n, i, time.Now().UnixNano()), n))
			}
			ref := time.Duration(n)*median(rtt) + median(connect)
			b.ReportMetric(float64(median(rdzv))/float64(ref), "rdzv/(N*rtt+connect)")
			b.ReportMetric(float64(median(rdzv).Microseconds()), "rdzv-µs")
			b.ReportMetric(float64(median(rtt).Microseconds()), "rtt-µs")
			b.ReportMetric(float64(median(connect).Microseconds()), "connect-µs")
			// How much of N clients' work the machine overlaps: 1 when N
			// round trips at once take as long as one, N when they run one
			// after another. The reference counts one connect for N
			// workers, which holds only where their connects overlap.
			b.ReportMetric(float64(median(overlap))/float64(median(rtt)), "N-rtt-at-once/rtt")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// timeRoundTrip is the mean time of one Get over the probe's open
// connection, after one Get to warm it.
func timeRoundTrip(b *testing.B, ctx context.Context, st rendezvous.Store, samples int) time.Duration {
	if _, err := st.Get(ctx, "bench/probe"); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for range samples {
		if _, err := st.Get(ctx, "bench/probe"); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start) / time.Duration(samples)
}

// timeConcurrentRoundTrip is the time for each of clients, open and warm,
// to make one Get, all started at once.
func timeConcurrentRoundTrip(b *testing.B, ctx context.Context, clients []rendezvous.Store) time.Duration {
	for _, c := range clients {
		if _, err := c.Get(ctx, "bench/probe"); err != nil {
			b.Fatal(err)
		}
	}
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range clients {
		wg.Go(func() { _, errs[i] = c.Get(ctx, "bench/probe") })
	}
	wg.Wait()
	d := time.Since(start)
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return d
}

// timeRendezvous starts n workers at once, each opening its client and
// joining, and returns the time until the last one holds its assignment.
func timeRendezvous(b *testing.B, ctx context.Context, t B4Target, run string, n int) time.Duration {
	var wg sync.WaitGroup
	stores := make([]rendezvous.Store, n)
	sessions := make([]*rendezvous.Session, n)
	errs := make([]error, n)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if stores[i], errs[i] = t.Open(ctx); errs[i] != nil {
				return
			}
			me := rendezvous.Member{ID: fmt.Sprintf("w%d", i), Node: "n", RankHint: i}
			sessions[i], errs[i] = rendezvous.Join(ctx, stores[i], run, me, rendezvous.Fixed(n), rendezvous.Options{})
		}()
	}
	wg.Wait()
	d := time.Since(start)
	for i := range n {
		if errs[i] != nil {
			b.Fatal(errs[i])
		}
		sessions[i].Leave(ctx)
		stores[i].Close()
	}
	return d
}
