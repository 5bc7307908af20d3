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
	"strings"
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
	// Attempt and Generation name the writer (WithWriter): the attempt at
	// the run (AttemptID) and the rendezvous generation whose rank 0 holds
	// the lease. Empty and 0 for a writer that gave none.
	Attempt    string `json:"attempt,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	// Renews is when the holder will renew the lease next (a third of its
	// time to live after this write), so that a writer waiting on a live
	// holder is refused when it sees the renewal, well before Expires.
	// Zero in a lease written before the field was.
	Renews time.Time `json:"renews,omitzero"`
	// PIDSpace names the space PID belongs to: the holder's kernel (its
	// boot id) and pid namespace. A writer in the same space whose look
	// finds no process PID takes the lease over without waiting out its
	// time (a run started again after its launcher was SIGKILLed). Empty
	// where it cannot be told (not Linux), and in leases written before.
	PIDSpace string `json:"pid_space,omitempty"`
}

// pidSpace is this process's PIDSpace: its kernel's boot id and its pid
// namespace, or "" where /proc does not say.
var pidSpace = sync.OnceValue(func() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(boot)) + " " + ns
})

// holderGone reports whether cur's holder is a process of this pid space
// that no longer exists.
func holderGone(cur leaseBody) bool {
	return cur.PIDSpace != "" && cur.PIDSpace == pidSpace() && cur.PID != os.Getpid() && processGone(cur.PID)
}

// lease is an ObjectRun's writer lock: an object created with
// PutIfAbsent, renewed by its holder every ttl/3 with a write conditional
// on its last ETag, and deleted by Close. A writer killed without Close
// leaves it to expire; the next OpenObject waits for that (at most ttl)
// and takes it over, except that a writer of the same attempt and a
// later generation takes it over at once (see supersedes).
type lease struct {
	st      *objstore.Store
	key     string
	ttl     time.Duration
	now     func() time.Time
	log     hclog.Logger
	attempt string // the writer's attempt; "" takes over no lease early
	gen     uint64 // the writer's generation; 0 takes over no lease early

	// io serialises the holder's renewals and checks, so that check never
	// compares the object with an ETag a renewal is replacing.
	io sync.Mutex
	mu sync.Mutex
	// Guarded by mu:
	holder string
	etag   string // of the holder's last write
	err    error  // set when a renewal failed or the lease was taken
	stop   func()
	done   chan struct{}
}

// supersedes reports whether the writer may take the lease held by cur
// without waiting for it to expire: cur's holder is rank 0 of an earlier
// generation of the same attempt. The gang has left that generation (a
// rank 0 joins a later one only after its members agreed the earlier one
// is over), so its holder is dead or fenced out; a renewal by it finds
// the lease changed and fails its later writes. Another attempt (a second
// run of the same name) or a holder of unknown generation is waited for.
func (l *lease) supersedes(cur leaseBody) bool {
	return l.attempt != "" && l.gen != 0 && cur.Attempt == l.attempt && cur.Generation != 0 && cur.Generation < l.gen
}

// acquire takes the lease: at once when it is free or held by an earlier
// generation of this attempt, else waiting out an expired holder's time.
func (l *lease) acquire(ctx context.Context) error {
	var id [12]byte
	_, _ = rand.Read(id[:])
	l.holder = hex.EncodeToString(id[:])
	for range 3 {
		err := l.put(ctx, putIfAbsent, "")
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
		if cur.Holder == l.holder {
			// This writer's own lease: an attempt the server took, whose
			// answer was lost, and the SDK retried.
			l.mu.Lock()
			l.etag = etag
			l.mu.Unlock()
			l.startRenewal(ctx)
			return nil
		}
		if l.supersedes(cur) {
			err := l.put(ctx, putIfMatch, etag)
			switch {
			case err == nil:
				l.log.Info("took over the writer lease of an earlier generation", "holder", cur.Holder,
					"host", cur.Host, "pid", cur.PID, "holder_generation", cur.Generation, "generation", l.gen)
				l.startRenewal(ctx)
				return nil
			case errors.Is(err, objstore.ErrChanged):
				continue // renewed, released or taken meanwhile: look again
			case errors.Is(err, objstore.ErrConditionalUnsupported):
				l.log.Warn("server has no If-Match writes: waiting for the earlier generation's lease to expire", "error", err)
			default:
				return err
			}
		}
		gone := holderGone(cur)
		if wait := cur.Expires.Sub(l.now()); wait > 0 && !gone {
			if wait > l.ttl+time.Second {
				return fmt.Errorf("%w: lease held by %s (pid %d) until %s", ErrLocked, cur.Host, cur.PID, cur.Expires.Format(time.RFC3339))
			}
			// A warning: the run waits, and its launcher shows warnings.
			l.log.Warn("the writer lease is held: waiting to see whether its holder renews it", "holder", cur.Holder,
				"host", cur.Host, "pid", cur.PID, "wait", wait.Round(time.Millisecond))
			// A live holder renews by cur.Renews: look then, and once more
			// at expiry if it has not (a renewal can be late).
			for _, at := range l.looks(cur) {
				if err := sleepCtx(ctx, at.Sub(l.now())); err != nil {
					return err
				}
				if _, now, err := l.read(ctx); err != nil || now != etag {
					return fmt.Errorf("%w: lease held by %s (pid %d), renewed", ErrLocked, cur.Host, cur.PID)
				}
			}
		}
		if gone {
			l.log.Warn("the writer lease's holder is gone (no process pid on this machine): taking the lease over",
				"holder", cur.Holder, "host", cur.Host, "pid", cur.PID)
		} else {
			l.log.Warn("taking over an expired writer lease", "holder", cur.Holder, "host", cur.Host, "pid", cur.PID)
		}
		switch err := l.takeOver(ctx, etag); {
		case err == nil:
			l.startRenewal(ctx)
			return nil
		case errors.Is(err, objstore.ErrChanged), errors.Is(err, objstore.ErrNotFound):
			// Another taker was first, or the holder came back: look again.
		default:
			return err
		}
	}
	return fmt.Errorf("%w: lease changed hands while taking it", ErrLocked)
}

// looks returns when a writer waiting on the lease cur looks at it again:
// shortly after its holder's next renewal is due, if that is before it
// expires, and at expiry.
func (l *lease) looks(cur leaseBody) []time.Time {
	if cur.Renews.IsZero() {
		return []time.Time{cur.Expires}
	}
	due := cur.Renews.Add(max(l.ttl/10, 500*time.Millisecond))
	if !due.Before(cur.Expires) {
		return []time.Time{cur.Expires}
	}
	return []time.Time{due, cur.Expires}
}

// takeOver replaces the expired lease whose ETag was read as etag, only
// if it is still that one: of two writers that found it expired, exactly
// one takes it, and neither deletes a lease the other has just written.
// It returns ErrChanged (or ErrNotFound) when the lease is no longer the
// one read. On a server without If-Match writes it deletes the lease
// with If-Match, or, failing that too, outright (the older, racy way,
// with a warning), and creates its own with If-None-Match.
func (l *lease) takeOver(ctx context.Context, etag string) error {
	ctx = l.requestContext(ctx)
	err := l.put(ctx, putIfMatch, etag)
	if !errors.Is(err, objstore.ErrConditionalUnsupported) {
		return err
	}
	err = l.st.DeleteIfMatch(ctx, l.key, etag)
	if errors.Is(err, objstore.ErrConditionalUnsupported) {
		l.log.Warn("server has no conditional writes but If-None-Match: two writers taking over an expired lease at once could both delete it", "error", err)
		err = l.st.Delete(ctx, l.key)
	}
	if err != nil {
		return fmt.Errorf("deleting expired lease: %w", err)
	}
	if err := l.put(ctx, putIfAbsent, ""); errors.Is(err, objstore.ErrExists) {
		return fmt.Errorf("%w: %w", objstore.ErrChanged, err)
	} else if err != nil {
		return err
	}
	return nil
}

func (l *lease) read(ctx context.Context) (leaseBody, string, error) {
	ctx = l.requestContext(ctx)
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

// How put writes the lease.
const (
	putPlain    = iota // unconditionally
	putIfAbsent        // only if there is none
	putIfMatch         // only over the object with the given ETag
)

// put writes the lease with a fresh expiry and records its ETag as the
// holder's.
func (l *lease) put(ctx context.Context, how int, etag string) error {
	ctx = l.requestContext(ctx)
	host, _ := os.Hostname()
	now := l.now()
	b, err := json.Marshal(leaseBody{Holder: l.holder, Host: host, PID: os.Getpid(), Expires: now.Add(l.ttl),
		Renews: now.Add(l.ttl / 3), Attempt: l.attempt, Generation: l.gen, PIDSpace: pidSpace()})
	if err != nil {
		return err
	}
	var res objstore.PutResult
	switch how {
	case putIfAbsent:
		res, err = l.st.PutIfAbsent(ctx, l.key, bytes.NewReader(b))
		if errors.Is(err, objstore.ErrConditionalUnsupported) {
			return fmt.Errorf("writer lease needs conditional writes: %w", err)
		}
	case putIfMatch:
		res, err = l.st.PutIfMatch(ctx, l.key, etag, bytes.NewReader(b))
	default:
		res, err = l.st.Put(ctx, l.key, bytes.NewReader(b))
	}
	switch {
	case err == nil:
		l.mu.Lock()
		l.etag = res.ETag
		l.mu.Unlock()
		return nil
	case errors.Is(err, objstore.ErrExists), errors.Is(err, objstore.ErrChanged), errors.Is(err, objstore.ErrConditionalUnsupported):
		return err
	}
	return fmt.Errorf("writing writer lease: %w", err)
}

// requestContext gives the lease's requests a stall allowance of a
// quarter of its time to live, or the store's if that is shorter
// (objstore.WithStallAllowance): a renewal held by a dead connection is
// tried again on a new one well before the lease it renews expires, where
// the store's default allowance (30 s) is as long as the lease itself.
func (l *lease) requestContext(ctx context.Context) context.Context {
	return objstore.WithStallAllowance(ctx, min(max(l.ttl/4, time.Second), l.st.StallTimeout()))
}

// startRenewal renews the lease every ttl/3 until release. A renewal that
// finds the lease changed (taken by another writer) makes every later
// write fail.
func (l *lease) startRenewal(ctx context.Context) {
	// Stopping lets a renewal in flight finish rather than cancelling it:
	// a write cancelled after the server took it would leave the lease
	// with an ETag the holder never learnt, which release's conditional
	// delete then refuses, leaving the next writer to wait out the TTL.
	quit := make(chan struct{})
	l.stop, l.done = func() { close(quit) }, make(chan struct{})
	go func() {
		defer close(l.done)
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := l.renew(ctx); err != nil && ctx.Err() == nil {
				l.log.Error("could not renew the writer lease", "error", err)
				l.fail(err)
				if errors.Is(err, ErrLocked) {
					return // another writer's now: nothing left to renew
				}
			}
		}
	}()
}

// renew writes the lease over the holder's last write only (If-Match), so
// that a renewal racing a takeover cannot overwrite the taker's lease. A
// server without If-Match writes gets the older read, compare and write.
func (l *lease) renew(ctx context.Context) error {
	l.io.Lock()
	defer l.io.Unlock()
	if err := l.lost(); err != nil {
		return err
	}
	l.mu.Lock()
	etag := l.etag
	l.mu.Unlock()
	err := l.put(ctx, putIfMatch, etag)
	if errors.Is(err, objstore.ErrConditionalUnsupported) {
		cur, _, rerr := l.read(ctx)
		if rerr != nil {
			return rerr
		}
		if cur.Holder != l.holder {
			return l.takenBy(cur)
		}
		return l.put(ctx, putPlain, "")
	}
	if errors.Is(err, objstore.ErrChanged) {
		return l.reconcile(ctx)
	}
	return err
}

// check returns nil if the holder still holds the lease: the object's
// ETag is still that of its last write. It reads (a HEAD) because S3 has
// no write conditional on another object's ETag; the manifest write that
// follows it is one round trip behind this answer. A lease found changed
// fails every later write, as a renewal's finding does.
func (l *lease) check(ctx context.Context) error {
	ctx = l.requestContext(ctx)
	l.io.Lock()
	defer l.io.Unlock()
	if err := l.lost(); err != nil {
		return err
	}
	info, err := l.st.Head(ctx, l.key)
	l.mu.Lock()
	etag := l.etag
	l.mu.Unlock()
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		err = fmt.Errorf("%w: writer lease deleted", ErrLocked)
	case err != nil:
		return fmt.Errorf("checking writer lease: %w", err)
	case info.ETag == etag:
		return nil
	default:
		if err = l.reconcile(ctx); err == nil {
			return nil
		}
	}
	l.fail(err)
	return err
}

// reconcile reads a lease whose ETag is not the holder's last: still the
// holder's (a write whose answer was lost, then retried), it adopts its
// ETag; another writer's, it returns ErrLocked.
func (l *lease) reconcile(ctx context.Context) error {
	cur, etag, err := l.read(ctx)
	if err != nil {
		return fmt.Errorf("%w: writer lease changed (%w)", ErrLocked, err)
	}
	if cur.Holder == l.holder {
		l.mu.Lock()
		l.etag = etag
		l.mu.Unlock()
		return nil
	}
	return l.takenBy(cur)
}

func (l *lease) takenBy(cur leaseBody) error {
	return fmt.Errorf("%w: writer lease taken by %s (pid %d, generation %d)", ErrLocked, cur.Host, cur.PID, cur.Generation)
}

func (l *lease) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

// lost returns why the lease no longer holds, or nil.
func (l *lease) lost() error {
	if l == nil {
		return nil // a reader's
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// release stops the renewal and deletes the lease if it is still ours
// (If-Match on its last ETag).
func (l *lease) release(ctx context.Context) error {
	ctx = l.requestContext(ctx)
	if l.stop == nil {
		return nil
	}
	l.stop()
	<-l.done
	l.stop = nil
	l.mu.Lock()
	etag := l.etag
	l.mu.Unlock()
	// Deleted only while it is our last write: a read, then a delete,
	// would delete a lease taken over between the two.
	err := l.st.DeleteIfMatch(ctx, l.key, etag)
	switch {
	case err == nil, errors.Is(err, objstore.ErrChanged):
		return nil
	case !errors.Is(err, objstore.ErrConditionalUnsupported):
		return fmt.Errorf("releasing writer lease: %w", err)
	}
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
