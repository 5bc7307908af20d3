package consulstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
)

// Two workers meet through Consul (here the fake agent; leave Address
// empty to use CONSUL_HTTP_ADDR).
func Example() {
	agent := fakeconsul.New(fakeconsul.Options{})
	defer agent.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	done := make(chan string, 2)
	for i := range 2 {
		go func() {
			st, err := consulstore.New(consulstore.Config{Address: agent.Addr()})
			if err != nil {
				done <- err.Error()
				return
			}
			defer st.Close()
			me := rendezvous.Member{ID: fmt.Sprintf("w%d", i), Node: "n", Addr: "127.0.0.1:0", RankHint: i}
			s, err := rendezvous.Join(ctx, st, "example", me, rendezvous.Fixed(2), rendezvous.Options{})
			if err != nil {
				done <- err.Error()
				return
			}
			defer s.Leave(ctx)
			a := s.Assignment()
			done <- fmt.Sprintf("%s: rank %d of %d", me.ID, a.Rank, a.WorldSize)
		}()
	}
	got := []string{<-done, <-done}
	if got[0] > got[1] {
		got[0], got[1] = got[1], got[0]
	}
	fmt.Println(got[0])
	fmt.Println(got[1])
	// Output:
	// w0: rank 0 of 2
	// w1: rank 1 of 2
}
