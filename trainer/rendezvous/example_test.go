package rendezvous_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// Two workers rendezvous through the embedded store served over TCP.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	secret := []byte("run-secret")

	// The launcher serves the embedded store.
	emb, err := rendezvous.StartEmbedded(ctx, "127.0.0.1:0", secret, nil)
	if err != nil {
		panic(err)
	}
	defer emb.Close()

	// Each worker opens the store and joins.
	ranks := make([]int, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			store, err := rendezvous.Open(ctx, emb.URI, secret, nil)
			if err != nil {
				panic(err)
			}
			defer store.Close()
			me := rendezvous.Member{ID: fmt.Sprintf("local-%d", i), Node: "n0", RankHint: i}
			s, err := rendezvous.Join(ctx, store, "quickstart", me, rendezvous.Fixed(2), rendezvous.Options{})
			if err != nil {
				panic(err)
			}
			defer s.Leave(ctx)
			ranks[i] = s.Assignment().Rank
		}()
	}
	wg.Wait()
	fmt.Println("ranks:", ranks)
	// Output: ranks: [0 1]
}
