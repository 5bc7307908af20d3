package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// leaseBody is the writer lease object.
type leaseBody struct {
	Holder  string    `json:"holder"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Expires time.Time `json:"expires"`
}

// lease is an ObjectRun's writer lock: an object created with
// PutIfAbsent, renewed by its holder every ttl/3 and deleted by Close. A
// writer killed without Close leaves it to expire; the next OpenObject
// waits for that (at most ttl) and takes it over.
type lease struct {
	st  *objstore.Store
	key string
	ttl time.Duration
	now func() time.Time
	log hclog.Logger

	mu sync.Mutex
	// Guarded by mu:
	holder string
	err    error // set when a renewal failed or the lease was taken
	stop   context.CancelFunc
	done   chan struct{}
}

// acquire takes the lease, waiting out an expired holder's time.
func (l *lease) acquire(ctx context.Context) error {
	var id [12]byte
	_, _ = rand.Read(id[:])
	l.holder = hex.EncodeToString(id[:])
	for range 3 {
		err := l.put(ctx, true)
		if !errors.Is(err, objstore.ErrExists) {
			if err == nil {
				l.startRenewal(ctx)
			}
			return err
		}
		cur, etag, err := l.read(ctx)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if wait := cur.Expires.Sub(l.now()); wait > 0 {
			if wait > l.ttl+time.Second {
				return fmt.Errorf("%w: lease held by %s (pid %d) until %s", ErrLocked, cur.Host, cur.PID, cur.Expires.Format(time.RFC3339))
			}
			if err := sleepCtx(ctx, wait); err != nil {
				return err
			}
			if _, now, err := l.read(ctx); err != nil || now != etag {
				return fmt.Errorf("%w: lease held by %s (pid %d), renewed", ErrLocked, cur.Host, cur.PID)
			}
		}
		l.log.Warn("taking over an expired writer lease", "holder", cur.Holder, "host", cur.Host, "pid", cur.PID)
		if err := l.st.Delete(ctx, l.key); err != nil {
			return fmt.Errorf("deleting expired lease: %w", err)
		}
	}
	return fmt.Errorf("%w: lease changed hands while taking it", ErrLocked)
}

func (l *lease) read(ctx context.Context) (leaseBody, string, error) {
	rc, info, err := l.st.Get(ctx, l.key)
	if err != nil {
		return leaseBody{}, "", err
	}
	defer rc.Close()
	var b leaseBody
	data, err := io.ReadAll(io.LimitReader(rc, 1<<16))
	if err == nil {
		err = json.Unmarshal(data, &b)
	}
	if err != nil {
		return leaseBody{}, "", fmt.Errorf("reading writer lease: %w", err)
	}
	return b, info.ETag, nil
}

func (l *lease) put(ctx context.Context, ifAbsent bool) error {
	host, _ := os.Hostname()
	b, err := json.Marshal(leaseBody{Holder: l.holder, Host: host, PID: os.Getpid(), Expires: l.now().Add(l.ttl)})
	if err != nil {
		return err
	}
	if ifAbsent {
		_, err = l.st.PutIfAbsent(ctx, l.key, bytes.NewReader(b))
		if errors.Is(err, objstore.ErrConditionalUnsupported) {
			return fmt.Errorf("writer lease needs conditional writes: %w", err)
		}
	} else {
		_, err = l.st.Put(ctx, l.key, bytes.NewReader(b))
	}
	if err != nil && !errors.Is(err, objstore.ErrExists) {
		return fmt.Errorf("writing writer lease: %w", err)
	}
	return err
}

// startRenewal renews the lease every ttl/3 until release. A renewal that
// finds the lease held by someone else makes every later write fail.
func (l *lease) startRenewal(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	l.stop, l.done = cancel, make(chan struct{})
	go func() {
		defer close(l.done)
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cur, _, err := l.read(ctx)
			if err == nil && cur.Holder != l.holder {
				err = fmt.Errorf("%w: writer lease taken by %s (pid %d)", ErrLocked, cur.Host, cur.PID)
			}
			if err == nil {
				err = l.put(ctx, false)
			}
			if err != nil && ctx.Err() == nil {
				l.log.Error("could not renew the writer lease", "error", err)
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
			}
		}
	}()
}

// lost returns why the lease no longer holds, or nil.
func (l *lease) lost() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// release stops the renewal and deletes the lease if it is still ours.
func (l *lease) release(ctx context.Context) error {
	if l.stop == nil {
		return nil
	}
	l.stop()
	<-l.done
	l.stop = nil
	cur, _, err := l.read(ctx)
	if errors.Is(err, objstore.ErrNotFound) || err == nil && cur.Holder != l.holder {
		return nil
	}
	if err != nil {
		return err
	}
	if err := l.st.Delete(ctx, l.key); err != nil {
		return fmt.Errorf("releasing writer lease: %w", err)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
