package consulstore_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/rendezvoustest"
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
	rendezvoustest.RunB4(b, rendezvoustest.B4Target{
		Open: func(context.Context) (rendezvous.Store, error) { return consulstore.New(cfg) },
		Connect: func(context.Context) error {
			c, err := net.DialTimeout("tcp", dialAddr, 5*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		},
	})
}
