package consulstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	capi "github.com/hashicorp/consul/api"
)

// Consul limits what one client address may ask of an agent: at most
// http_max_conns_per_client (default 200) connections at once, and, where
// rate limits are set, so many requests a second. Beyond them it answers
// 429 Too Many Requests (503 from some rate limiters) without doing
// anything. A gang of many workers on one host meets these limits while it
// joins, so the clients built here retry such answers, after a jittered
// pause that doubles up to maxBackoff, for as long as the request's
// context allows; and every store and health check of a process shares
// one client (SharedClient), so one process holds a few connections, not a
// few per user.

// maxIdlePerHost bounds the idle connections a client keeps to its agent:
// enough for a worker's concurrent calls (a blocking watch, a keep-alive,
// a health update, a progress put, a join), few enough that a host full of
// workers stays well under http_max_conns_per_client.
const maxIdlePerHost = 8

// NewClient builds a Consul client from capi.DefaultConfig (so from
// CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN and friends), with address applied
// when it is not empty, whose requests Consul pushes back (429, 503) are
// retried. It also returns the client's transport, whose idle connections
// the owner closes when done. Most callers want SharedClient.
func NewClient(address string) (*capi.Client, *http.Transport, error) {
	conf := capi.DefaultConfig()
	if address != "" {
		conf.Address = address
	}
	conf.Transport.MaxIdleConnsPerHost = maxIdlePerHost
	c, err := capi.NewClient(conf)
	if err != nil {
		return nil, nil, fmt.Errorf("consul client: %w", err)
	}
	// capi.NewClient made conf.HttpClient (with TLS, or a unix socket);
	// the client holds that same *http.Client.
	conf.HttpClient.Transport = &pushbackTransport{base: conf.HttpClient.Transport, first: DefaultRetryPause, max: maxBackoff}
	return c, conf.Transport, nil
}

var shared struct {
	mu      sync.Mutex
	clients map[string]*capi.Client // by address ("" for CONSUL_HTTP_ADDR)
}

// SharedClient returns this process's one client for address (see
// NewClient), building it on first use. It is never closed; its idle
// connections go when the process does.
func SharedClient(address string) (*capi.Client, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if c, ok := shared.clients[address]; ok {
		return c, nil
	}
	c, _, err := NewClient(address)
	if err != nil {
		return nil, err
	}
	if shared.clients == nil {
		shared.clients = make(map[string]*capi.Client)
	}
	shared.clients[address] = c
	return c, nil
}

// PushedBack reports whether an HTTP status is Consul declining a request
// it did not carry out, to be tried again later: 429 (the per-client
// connection limit, a rate limit) or 503 (a rate limit, an agent shutting
// down or without a leader to forward to).
func PushedBack(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// ErrPushedBack is matched (errors.Is) by the error of a request Consul
// kept pushing back (see PushedBack) until the request's own deadline.
var ErrPushedBack = errors.New("consul pushed back")

// pushbackTransport retries requests Consul pushed back after a jittered
// pause, from first doubling up to max, while the request's context
// allows; then it fails with ErrPushedBack, so the store can try again
// with a fresh request timeout inside its caller's deadline (Store.again).
type pushbackTransport struct {
	base       http.RoundTripper
	first, max time.Duration
}

func (t *pushbackTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pause := t.first
	for try := req; ; {
		resp, err := t.base.RoundTrip(try)
		if err != nil || !PushedBack(resp.StatusCode) || (req.Body != nil && req.GetBody == nil) {
			return resp, err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
		d := jitter(pause)
		if deadline, ok := req.Context().Deadline(); ok && time.Until(deadline) < d {
			return nil, fmt.Errorf("%w: %s: %s", ErrPushedBack, resp.Status, bytes.TrimSpace(body))
		}
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-req.Context().Done():
			timer.Stop()
			return nil, req.Context().Err()
		}
		pause = min(2*pause, t.max)
		try = req.Clone(req.Context())
		if req.GetBody != nil {
			if try.Body, err = req.GetBody(); err != nil {
				return nil, fmt.Errorf("consul request body: %w", err)
			}
		}
	}
}

// again runs op, a call that makes one request with its own timeout, until
// it succeeds, fails otherwise than by ErrPushedBack, or ctx ends: a gang
// joining through an agent at its connection limit keeps trying for as
// long as its join may take.
func (s *Store) again(ctx context.Context, op func() error) error {
	for {
		err := op()
		if !errors.Is(err, ErrPushedBack) || ctx.Err() != nil {
			return err
		}
		s.cfg.Logger.Debug("consul pushed back; trying again", "error", err)
		if sleepCtx(ctx, jitter(s.cfg.RetryPause)) != nil {
			return err
		}
	}
}

// jitter returns a pause between d/2 and d, so that workers pushed back at
// once do not all come back at once.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}
