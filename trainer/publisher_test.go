package trainer

import (
	"sync"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// The publisher never blocks its caller, puts records in order, skips the
// ones overtaken while a put was slow, and puts the last one before close
// returns.
func TestPublisherLatestWins(t *testing.T) {
	var mu sync.Mutex
	var got []int64
	gate, started := make(chan struct{}), make(chan struct{})
	p := newPublisher(func(r storage.Record) {
		if r.Step == 1 {
			close(started)
			<-gate // a slow store while steps 2..9 are offered
		}
		mu.Lock()
		got = append(got, r.Step)
		mu.Unlock()
	})
	p.offer(storage.Record{Step: 1})
	<-started
	for step := int64(2); step <= 9; step++ {
		p.offer(storage.Record{Step: step}) // must not block on the slow put
	}
	close(gate)
	p.close()
	must.Eq(t, 1, got[0])
	must.Eq(t, 9, got[len(got)-1])
	must.Less(t, 4, len(got)) // intermediate records were dropped, not queued
	for i := 1; i < len(got); i++ {
		must.Greater(t, got[i-1], got[i])
	}
}
