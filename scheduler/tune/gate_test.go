package tune

import (
	"context"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// The start gate lets workers go when it opens, whether they connected
// before or after; closing it unopened turns them away.
func TestStartGate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Run("waiting workers go when it opens", func(t *testing.T) {
		g, err := newStartGate()
		must.NoError(t, err)
		defer g.close()
		done := make(chan error, 1)
		go func() { done <- awaitStart(ctx, g.addr()) }()
		select {
		case err := <-done:
			t.Fatalf("a worker went before the gate opened: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		g.open()
		must.NoError(t, <-done)
	})
	t.Run("late workers go at once", func(t *testing.T) {
		g, err := newStartGate()
		must.NoError(t, err)
		defer g.close()
		g.open()
		must.NoError(t, awaitStart(ctx, g.addr()))
	})
	t.Run("closed unopened, workers are turned away", func(t *testing.T) {
		g, err := newStartGate()
		must.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- awaitStart(ctx, g.addr()) }()
		time.Sleep(20 * time.Millisecond)
		g.close()
		must.Error(t, <-done)
	})
	t.Run("a cancelled worker stops waiting", func(t *testing.T) {
		g, err := newStartGate()
		must.NoError(t, err)
		defer g.close()
		wctx, wcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- awaitStart(wctx, g.addr()) }()
		time.Sleep(20 * time.Millisecond)
		wcancel()
		must.Error(t, <-done)
	})
}
