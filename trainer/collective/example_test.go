package collective_test

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/nomad-train/nomad-train/trainer/collective"
)

// Two ranks in one process for the example; in training each rank is its
// own process and learns the addresses from the rendezvous.
func Example() {
	ctx := context.Background()
	const n = 2
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for r := range n {
		lns[r], _ = net.Listen("tcp", "127.0.0.1:0")
		addrs[r] = lns[r].Addr().String()
	}
	results := make([][]float32, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			g, err := collective.New(ctx, collective.Config{
				Rank: r, Size: n, Listener: lns[r], Peers: addrs, Secret: []byte("run secret"),
			})
			if err != nil {
				panic(err)
			}
			defer g.Close()
			grads := []float32{float32(r + 1), 10 * float32(r+1)}
			if err := g.AllReduceFloat32(ctx, grads, collective.Mean); err != nil {
				panic(err)
			}
			results[r] = grads
		})
	}
	wg.Wait()
	fmt.Println(results[0], results[1])
	// Output: [1.5 15] [1.5 15]
}
