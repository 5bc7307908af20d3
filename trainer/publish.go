package trainer

import (
	"context"
	"sync"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Rank 0's progress, published to the rendezvous store off the training
// loop's path, at most once a second.

// publishProgress hands rank 0's latest report to the publisher, which
// puts it in the rendezvous store in the background (putProgress): the
// report is already committed to storage, and the store's round trips
// should not lengthen the training step.
func (w *worker) publishProgress(rec storage.Record) { w.pub.offer(rec) }

// putProgress puts a report at "<run>/progress" in the rendezvous store (on
// Nomad, under the job's Consul prefix:
// "nomad-train/<namespace>/<job>/<run>/progress"), where `nomad-train run`
// and `status` read it without reaching any worker. Best effort.
func (w *worker) putProgress(rec storage.Record) {
	line, err := storage.EncodeRecord(rec)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := rendezvous.ProgressKey(w.env.RunName)
	for range 3 { // a lost compare-and-set is only an older report of ours
		v, err := w.store.Get(ctx, key)
		if err != nil {
			w.log.Debug("publish progress", "error", err)
			return
		}
		if _, ok, err := w.store.CompareAndSet(ctx, key, line, v.Version); err != nil || ok {
			return
		}
	}
}

// publishEvery spaces rank 0's progress puts: on Consul each is a Raft
// write that wakes every member's watch of the run's keys, and the CLI
// that shows them polls no faster.
const publishEvery = time.Second

// publisher runs put on the latest offered record, one at a time and at
// most one per every, on its own goroutine: a record offered meanwhile
// replaces any record waiting, so a slow store or a fast training loop
// delays the display and never the caller. close puts what is waiting,
// then returns.
type publisher struct {
	put   func(storage.Record)
	every time.Duration
	mu    sync.Mutex
	next  *storage.Record
	wake  chan struct{}
	quit  chan struct{}
	done  chan struct{}
}

func newPublisher(put func(storage.Record), every time.Duration) *publisher {
	p := &publisher{put: put, every: every, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

// offer queues rec in place of any record not yet put; it never blocks.
func (p *publisher) offer(rec storage.Record) {
	p.mu.Lock()
	p.next = &rec
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// putWaiting puts the record waiting, if any.
func (p *publisher) putWaiting() {
	p.mu.Lock()
	r := p.next
	p.next = nil
	p.mu.Unlock()
	if r != nil {
		p.put(*r)
	}
}

func (p *publisher) loop() {
	defer close(p.done)
	var last time.Time // when the last put began
	for {
		select {
		case <-p.wake:
		case <-p.quit:
			p.putWaiting()
			return
		}
		if d := p.every - time.Since(last); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-p.quit:
				t.Stop()
				p.putWaiting()
				return
			}
		}
		last = time.Now()
		p.putWaiting()
	}
}

// close puts the record still waiting, if any, and stops the goroutine.
func (p *publisher) close() {
	close(p.quit)
	<-p.done
}
