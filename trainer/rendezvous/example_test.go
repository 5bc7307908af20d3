package rendezvous_test

import (
	"context"
	"fmt"
	"net"
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
	st := rendezvous.NewMemStore(nil)
	defer st.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv, err := rendezvous.NewServer(st, rendezvous.ServerConfig{Listener: ln, Secret: secret})
	if err != nil {
		panic(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx) }()
	defer func() { stop(); <-served }()

	// Each worker opens the store and joins.
	ranks := make([]int, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			store, err := rendezvous.Open(ctx, "embedded://"+srv.Addr(), secret, nil)
			if err != nil {
				panic(err)
			}
			defer store.Close()
			me := rendezvous.Member{ID: fmt.Sprintf("local-%d", i), Node: "n0", RankHint: i}
			s, err := rendezvous.Join(ctx, store, "quickstart", me, 2, rendezvous.Options{})
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
