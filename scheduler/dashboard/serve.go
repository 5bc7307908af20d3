package dashboard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Serve serves h on ln until ctx is done (then it shuts down, giving open
// requests two seconds) or serving fails. Requests share ctx: its end
// ends the open event streams too.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if hs.Shutdown(sctx) != nil {
			hs.Close()
		}
		return nil
	}
}
