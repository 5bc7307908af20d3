package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors a Store returns for conditions callers test.
var (
	// ErrLeaseNotFound is returned when a lease has expired, was revoked, or
	// never existed.
	ErrLeaseNotFound = errors.New("lease not found")
	// ErrClosed is returned by a Store that has been closed, or whose
	// connection to its server is gone.
	ErrClosed = errors.New("store closed")
)

// Value is one key's data and version. Version 0 means the key is absent.
// Versions come from a store-wide monotonic index, as Consul's ModifyIndex.
type Value struct {
	Data    []byte
	Version uint64
}

// KeyValue is one entry of a List.
type KeyValue struct {
	Key     string `json:"key"`
	Data    []byte `json:"data,omitempty"`
	Version uint64 `json:"version"`
}

// Store is the small key-value contract the rendezvous runs on. It is shaped
// after Consul KV with TTL sessions: versions are modify indexes,
// CompareAndSet is a CAS on the modify index, waits are blocking queries, and
// leases are sessions with behaviour "delete".
//
// Waits may return early with nothing changed (spurious wake-ups) and
// versions may go backwards (index resets); callers compare data and loop.
type Store interface {
	// Get returns the key's current value; an absent key gives Version 0 and
	// no error.
	Get(ctx context.Context, key string) (Value, error)
	// CompareAndSet writes data if the key's version is still version
	// (version 0: only if the key is absent). ok is false, with no error,
	// when the version did not match. It returns the key's value after the
	// call: the one written, or the one that won (so a loser need not read
	// again; a store that cannot tell atomically reads it afterwards).
	// Writing the data a key already holds may leave its version as it
	// was (Consul skips such writes), and whether a CAS over an ephemeral
	// key keeps it bound to its lease differs between stores; the
	// rendezvous does neither.
	CompareAndSet(ctx context.Context, key string, data []byte, version uint64) (current Value, ok bool, err error)
	// Delete removes the key whatever its version. Deleting an absent key
	// is not an error.
	Delete(ctx context.Context, key string) error
	// Wait blocks until the key's version differs from after (deletion
	// included) and returns the current value, or returns ctx's error.
	Wait(ctx context.Context, key string, after uint64) (Value, error)
	// List returns the keys under prefix in key order and the prefix's
	// index, to pass to WaitPrefix.
	List(ctx context.Context, prefix string) ([]KeyValue, uint64, error)
	// WaitPrefix blocks until the prefix's index differs from after (a key
	// under it was written or deleted) and returns what List returns.
	WaitPrefix(ctx context.Context, prefix string, after uint64) ([]KeyValue, uint64, error)
	// Grant creates a lease that expires unless renewed within ttl.
	Grant(ctx context.Context, ttl time.Duration) (Lease, error)
	// PutEphemeral writes key bound to lease: the key is deleted when the
	// lease expires or is revoked.
	PutEphemeral(ctx context.Context, lease Lease, key string, data []byte) error
	// Txn applies ops in order as one atomic step (one Consul /v1/txn):
	// all of them, or none when a TxnCheck or TxnCAS finds its key at
	// another version; then the result says which op and the key's current
	// value, and err is nil. A TxnPutEphemeral takes the key over from
	// another lease as PutEphemeral does. Ops name distinct keys; at most
	// one TxnList, as the last op, which sees the writes before it.
	Txn(ctx context.Context, ops []TxnOp) (TxnResult, error)
	// Close releases the store's resources; leases granted through it are
	// revoked where the store can tell (a closed connection).
	Close() error
}

// TxnKind is what a TxnOp does.
type TxnKind int

// Kinds of TxnOp.
const (
	// TxnCheck requires the key to be at Version (0: absent).
	TxnCheck TxnKind = iota + 1
	// TxnCAS writes Data if the key is at Version (0: absent).
	TxnCAS
	// TxnPutEphemeral writes Data bound to Lease.
	TxnPutEphemeral
	// TxnList reads the keys under the prefix Key.
	TxnList
)

func (k TxnKind) String() string {
	switch k {
	case TxnCheck:
		return "check"
	case TxnCAS:
		return "cas"
	case TxnPutEphemeral:
		return "put_ephemeral"
	case TxnList:
		return "list"
	}
	return fmt.Sprintf("TxnKind(%d)", int(k))
}

// TxnOp is one operation of a Store.Txn.
type TxnOp struct {
	Kind    TxnKind
	Key     string // the key; the prefix for TxnList
	Data    []byte // TxnCAS, TxnPutEphemeral
	Version uint64 // TxnCheck, TxnCAS
	Lease   Lease  // TxnPutEphemeral
}

// TxnResult is the outcome of a Store.Txn.
type TxnResult struct {
	// OK is true when the ops were applied.
	OK bool
	// Version is the version the writes got (one index for the whole
	// transaction, as Consul's raft index), when OK and there were writes.
	Version uint64
	// List is what the TxnList op read, in key order, when OK.
	List []KeyValue
	// Failed is the index of the op whose version did not match, and
	// Current that key's value then (Version 0: absent), when not OK.
	Failed  int
	Current Value
}

// Limits every Store keeps to, Consul's.
const (
	// MaxLeaseTTL is the longest lease TTL (Consul's session TTL limit).
	MaxLeaseTTL = 24 * time.Hour
	// MaxTxnOps is the most ops in one transaction (Consul's documented
	// limit; some versions allow 128).
	MaxTxnOps = 64
)

// CheckTxn validates the shape of a transaction, as every Store requires it.
func CheckTxn(ops []TxnOp) error {
	if len(ops) > MaxTxnOps {
		return fmt.Errorf("transaction of %d ops: at most %d", len(ops), MaxTxnOps)
	}
	seen := make(map[string]bool, len(ops))
	for i, op := range ops {
		switch op.Kind {
		case TxnCheck, TxnCAS:
		case TxnPutEphemeral:
			if op.Lease == nil {
				return fmt.Errorf("transaction op %d: put_ephemeral without a lease", i)
			}
		case TxnList:
			if i != len(ops)-1 {
				return fmt.Errorf("transaction op %d: a list must be the last op", i)
			}
			continue
		default:
			return fmt.Errorf("transaction op %d: unknown kind %v", i, op.Kind)
		}
		if seen[op.Key] {
			return fmt.Errorf("transaction op %d: key %s named twice", i, op.Key)
		}
		seen[op.Key] = true
	}
	return nil
}

// Lease is a liveness token (a Consul TTL session). Keys bound to it vanish
// when it expires or is revoked.
type Lease interface {
	// ID names the lease.
	ID() string
	// TTL is how long the lease lives without a renewal.
	TTL() time.Duration
	// Renew extends the lease once; ErrLeaseNotFound if it is gone.
	Renew(ctx context.Context) error
	// KeepAlive renews the lease every TTL/3 until ctx is done (then it
	// returns nil) or a renewal fails (then it returns the error).
	KeepAlive(ctx context.Context) error
	// Revoke ends the lease now and deletes its keys.
	Revoke(ctx context.Context) error
}

// Clock is the time source of stores and sessions; tests inject a fake one.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f once d has passed (the wall clock calls it in its own
	// goroutine). It must not call f before returning.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (RealClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

func orRealClock(c Clock) Clock {
	if c == nil {
		return RealClock{}
	}
	return c
}

// sleep waits d on clock or until ctx is done.
func sleep(ctx context.Context, clock Clock, d time.Duration) error {
	fired := make(chan struct{})
	t := clock.AfterFunc(d, func() { close(fired) })
	defer t.Stop()
	select {
	case <-fired:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// keepAlive is the KeepAlive loop shared by every Lease implementation. It
// renews every TTL/3, each attempt bounded by TTL/3; a failed attempt is
// retried at the next tick unless the lease is known gone or a whole TTL has
// passed since the last renewal.
func keepAlive(ctx context.Context, clock Clock, l Lease) error {
	ttl := l.TTL()
	every := ttl / 3
	if every <= 0 {
		every = time.Second
	}
	last := clock.Now()
	for {
		if err := sleep(ctx, clock, every); err != nil {
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		err := l.Renew(rctx)
		cancel()
		switch {
		case err == nil:
			last = clock.Now()
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrLeaseNotFound), errors.Is(err, ErrClosed), clock.Now().Sub(last) >= ttl:
			return fmt.Errorf("keep lease %s alive: %w", l.ID(), err)
		}
	}
}
