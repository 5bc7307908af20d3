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
// What bounds it: with all N workers starting at the same instant, each
// connects (TCP and the auth handshake, as the reference's one connect),
// grants its lease and signs in with one transaction; the one whose listing
// shows the gang whole writes the complete generation, which wakes the N-1
// others' waits. That is 3N+1 store calls without conflicts (4 workers: 12;
// the compare-and-set rounds before took about 26). On a machine with fewer
// cores than workers the run is CPU-bound: the N connects alone then cost
// about N/cores times the reference's one, so the ratio grows with N.
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
