package consulstore_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
)

// BenchmarkRendezvous (B4, Consul part) times a whole rendezvous of N
// workers, each with its own Consul client, against the reference
// N·(one store round trip) + (one TCP connect to the agent), both measured
// in the same run against the same agent, and reports the ratio as
// "rdzv/(N*rtt+connect)" (medians). "agent=consul" runs only when
// CONSUL_HTTP_ADDR names an agent; "agent=fake" runs on the in-process fake
// and checks the harness, not Consul.
func BenchmarkRendezvous(b *testing.B) {
	b.Run("agent=fake", func(b *testing.B) {
		fake := fakeconsul.New(fakeconsul.Options{})
		b.Cleanup(fake.Close)
		benchRendezvous(b, consulstore.Config{Address: fake.Addr()}, fake.Addr())
	})
	b.Run("agent=consul", func(b *testing.B) {
		addr := os.Getenv("CONSUL_HTTP_ADDR")
		if addr == "" {
			b.Skip("CONSUL_HTTP_ADDR is not set: no Consul agent to measure")
		}
		prefix := fmt.Sprintf("nomad-train-bench/%d/", time.Now().UnixNano())
		b.Cleanup(func() {
			if st, err := consulstore.New(consulstore.Config{}); err == nil {
				st.Client().KV().DeleteTree(prefix, nil)
				st.Close()
			}
		})
		benchRendezvous(b, consulstore.Config{Prefix: prefix}, hostPort(addr))
	})
}

// hostPort strips a scheme from CONSUL_HTTP_ADDR.
func hostPort(addr string) string {
	if i := strings.Index(addr, "://"); i >= 0 {
		addr = addr[i+3:]
	}
	return strings.TrimSuffix(addr, "/")
}

func benchRendezvous(b *testing.B, cfg consulstore.Config, dialAddr string) {
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			ctx := context.Background()
			probe, err := consulstore.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer probe.Close()
			var rdzv, rtt, connect []time.Duration
			for i := 0; b.Loop(); i++ {
				connect = append(connect, timeConnect(b, dialAddr))
				rtt = append(rtt, timeRoundTrip(b, ctx, probe, 20))
				rdzv = append(rdzv, timeRendezvous(b, ctx, cfg, fmt.Sprintf("bench-%d-%d-%d", n, i, time.Now().UnixNano()), n))
			}
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

func timeConnect(b *testing.B, addr string) time.Duration {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	d := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	c.Close()
	return d
}

// timeRoundTrip is the mean time of one Get over the probe's open
// connection.
func timeRoundTrip(b *testing.B, ctx context.Context, st rendezvous.Store, samples int) time.Duration {
	if _, err := st.Get(ctx, "bench/probe"); err != nil { // warm the connection
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

// timeRendezvous starts n workers at once, each with a new client (so its
// own connection) joining, and returns the time until the last one holds
// its assignment.
func timeRendezvous(b *testing.B, ctx context.Context, cfg consulstore.Config, run string, n int) time.Duration {
	var wg sync.WaitGroup
	stores := make([]*consulstore.Store, n)
	sessions := make([]*rendezvous.Session, n)
	errs := make([]error, n)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if stores[i], errs[i] = consulstore.New(cfg); errs[i] != nil {
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
