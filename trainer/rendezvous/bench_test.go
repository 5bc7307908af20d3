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
// connects (TCP, then one round trip of the auth handshake; the dialer's
// proof rides with its first request), grants its lease and signs in with
// one transaction, the grant and the transaction in one write and their
// answers in one; the one whose listing shows the gang whole writes the
// complete generation, which wakes the N-1 others' waits. The 3N+1 store
// calls without conflicts take 2N+1 round trips (the compare-and-set
// rounds before took about 26 calls for 4 workers). The reference's connect is
// Dial then Close, so it leaves out the proof's bytes that a worker sends.
// On a machine with fewer cores than workers the run is CPU-bound: the N
// connects alone then cost about N/cores times the reference's one, so the
// ratio grows with N. "N-rtt-at-once/rtt" shows how much the machine
// overlaps N clients' work (1: all of it, N: none); where it is N, N
// workers need at least N connects and 2N round trips one after another.
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
