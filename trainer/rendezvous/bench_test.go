package rendezvous_test

import (
	"context"
	"testing"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/rendezvoustest"
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
	st := rendezvous.NewMemStore(nil)
	b.Cleanup(func() { st.Close() })
	addr := serve(b, st, testSecret, nil)
	rendezvoustest.RunB4(b, rendezvoustest.B4Target{
		Open: func(ctx context.Context) (rendezvous.Store, error) {
			return rendezvous.Dial(ctx, addr, testSecret, nil)
		},
		Connect: func(ctx context.Context) error {
			c, err := rendezvous.Dial(ctx, addr, testSecret, nil)
			if err == nil {
				c.Close()
			}
			return err
		},
	})
}
