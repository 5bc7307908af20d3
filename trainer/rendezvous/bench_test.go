package rendezvous_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// BenchmarkRendezvous (B4) times a whole rendezvous of N workers, each
// dialing the embedded store's TCP server and joining, against the
// reference N·(one store round trip) + (one authenticated TCP connect),
// both measured in the same run on the same server. It reports the ratio
// as "rdzv/(N*rtt+connect)" (medians over the iterations); the goal
// is at most 3.
//
// What bounds it: with all N workers starting at the same instant, the
// critical path is one connect, the lease grant (alongside the first read),
// the alive key, and N compare-and-set rounds (one winner per round), then
// the wake-up: about connect + (N+3) round trips. The message count grows
// as N²/2 (failed CAS and waits re-armed after each join), so on a machine
// with fewer cores than workers, where the run is CPU-bound, the ratio
// grows with N.
func BenchmarkRendezvous(b *testing.B) {
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			st := rendezvous.NewMemStore(nil)
			b.Cleanup(func() { st.Close() })
			addr := serve(b, st, testSecret, nil)
			ctx := context.Background()
			probe := dial(b, addr, testSecret)
			defer probe.Close()

			var rdzv, rtt, connect []time.Duration
			for i := 0; b.Loop(); i++ {
				connect = append(connect, timeConnect(b, ctx, addr))
				rtt = append(rtt, timeRoundTrip(b, ctx, probe, 20))
				rdzv = append(rdzv, timeRendezvous(b, ctx, addr, fmt.Sprintf("bench-%d-%d", n, i), n))
			}
			// Medians: on a shared machine a few iterations stall on the
			// scheduler, and the mean would measure the machine's load.
			ref := time.Duration(n)*median(rtt) + median(connect)
			b.ReportMetric(float64(median(rdzv))/float64(ref), "rdzv/(N*rtt+connect)")
			b.ReportMetric(float64(median(rdzv).Microseconds()), "rdzv-µs")
			b.ReportMetric(float64(median(rtt).Microseconds()), "rtt-µs")
			b.ReportMetric(float64(median(connect).Microseconds()), "connect-µs")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func timeConnect(b *testing.B, ctx context.Context, addr string) time.Duration {
	start := time.Now()
	c, err := rendezvous.Dial(ctx, addr, testSecret, nil)
	d := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	c.Close()
	return d
}

// timeRoundTrip is the mean time of one Get over an open connection.
func timeRoundTrip(b *testing.B, ctx context.Context, c rendezvous.Store, samples int) time.Duration {
	start := time.Now()
	for range samples {
		if _, err := c.Get(ctx, "bench/probe"); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start) / time.Duration(samples)
}

// timeRendezvous starts n workers at once, each dialing and joining, and
// returns the time until the last one holds its assignment.
func timeRendezvous(b *testing.B, ctx context.Context, addr, run string, n int) time.Duration {
	var wg sync.WaitGroup
	stores := make([]*rendezvous.Client, n)
	sessions := make([]*rendezvous.Session, n)
	errs := make([]error, n)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = rendezvous.Dial(ctx, addr, testSecret, nil)
			if errs[i] != nil {
				return
			}
			me := rendezvous.Member{ID: fmt.Sprintf("w%d", i), Node: "n", RankHint: i}
			sessions[i], errs[i] = rendezvous.Join(ctx, stores[i], run, me, n, rendezvous.Options{})
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
