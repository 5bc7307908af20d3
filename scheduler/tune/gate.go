package tune

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nomad-train/nomad-train/trainer"
)

// StartGateEnv holds, in the environment of a worker process started
// ahead of its trial (Processes.Prepare), the loopback address of the
// gate it waits at: the backend sends one byte when the trial runs, or
// closes the connection (and stops the process) when it does not.
const StartGateEnv = "NOMAD_TRAIN_TUNE_GATE"

// RunWorker is trainer.RunWorker for a worker copy of this program run by
// the Processes backend: a worker started ahead of its trial first waits
// until the trial runs. Tuner.Fit calls it in a worker copy; a program
// that starts its workers itself calls it instead of trainer.RunWorker.
func RunWorker(ctx context.Context, fn trainer.TrainFunc) int {
	if addr := os.Getenv(StartGateEnv); addr != "" {
		if err := awaitStart(ctx, addr); err != nil {
			fmt.Fprintf(os.Stderr, "nomad-train worker: %v\n", err)
			return 1
		}
	}
	return trainer.RunWorker(ctx, fn)
}

// awaitStart waits at the gate until the backend opens it. There is no
// deadline: a slot may stay busy for as long as a trial trains; the wait
// ends with the backend, whose end closes the connection.
func awaitStart(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("reach the tuner's start gate: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return fmt.Errorf("wait for the trial to start: %w", err)
	}
	return nil
}

// startGate is the backend's side: a loopback listener that holds every
// connection until open.
type startGate struct {
	ln   net.Listener
	done chan struct{} // closed when serve returns

	mu     sync.Mutex // guards below
	opened bool
	held   []net.Conn
}

func newStartGate() (*startGate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for a start gate: %w", err)
	}
	g := &startGate{ln: ln, done: make(chan struct{})}
	go g.serve()
	return g, nil
}

func (g *startGate) addr() string { return g.ln.Addr().String() }

func (g *startGate) serve() {
	defer close(g.done)
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return // closed
		}
		g.mu.Lock()
		if g.opened {
			release(c)
		} else {
			g.held = append(g.held, c)
		}
		g.mu.Unlock()
	}
}

// release lets one held worker go.
func release(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write([]byte{1})
	c.Close()
}

// open lets every worker go, those connected and those yet to connect.
func (g *startGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opened = true
	for _, c := range g.held {
		release(c)
	}
	g.held = nil
}

// close stops listening and drops held workers (they exit).
func (g *startGate) close() {
	g.ln.Close()
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.held {
		c.Close()
	}
	g.held = nil
}
