package rendezvous

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// MemStore is the embedded Store: everything in memory, one monotonic index
// for every write (as Consul's raft index), leases expiring on an injected
// clock. A Server makes it reachable over TCP. Safe for concurrent use.
type MemStore struct {
	clock Clock

	mu sync.Mutex
	// guarded by mu:
	index   uint64
	kv      map[string]memEntry
	tombs   map[string]uint64 // deleted key -> index of its deletion
	keys    []string          // every key of kv and tombs, sorted, for prefix scans
	leases  map[string]*memLease
	changed chan struct{} // closed and replaced on every write
	closed  bool
}

type memEntry struct {
	data    []byte
	version uint64
	lease   string
}

// NewMemStore returns an empty store on clock (nil: the wall clock).
func NewMemStore(clock Clock) *MemStore {
	return &MemStore{
		clock:   orRealClock(clock),
		kv:      make(map[string]memEntry),
		tombs:   make(map[string]uint64),
		leases:  make(map[string]*memLease),
		changed: make(chan struct{}),
	}
}

// bump advances the index and wakes every waiter. Called with mu held.
func (m *MemStore) bump() uint64 {
	m.index++
	close(m.changed)
	m.changed = make(chan struct{})
	return m.index
}

func (m *MemStore) check(ctx context.Context) error {
	if m.closed {
		return ErrClosed
	}
	return ctx.Err()
}

// Get implements Store.
func (m *MemStore) Get(ctx context.Context, key string) (Value, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return Value{}, err
	}
	return m.getLocked(key), nil
}

func (m *MemStore) getLocked(key string) Value {
	e, ok := m.kv[key]
	if !ok {
		return Value{}
	}
	return Value{Data: bytes.Clone(e.data), Version: e.version}
}

// CompareAndSet implements Store.
func (m *MemStore) CompareAndSet(ctx context.Context, key string, data []byte, version uint64) (Value, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return Value{}, false, err
	}
	if m.kv[key].version != version {
		return m.getLocked(key), false, nil
	}
	m.putLocked(key, data, "")
	return Value{Data: bytes.Clone(data), Version: m.index}, true, nil
}

func (m *MemStore) putLocked(key string, data []byte, lease string) {
	m.putAtLocked(key, data, lease, m.bump())
}

// putAtLocked writes key at version v (the index already bumped).
func (m *MemStore) putAtLocked(key string, data []byte, lease string, v uint64) {
	if old, ok := m.kv[key]; ok && old.lease != "" && old.lease != lease {
		if l := m.leases[old.lease]; l != nil {
			delete(l.keys, key) // a plain write makes the key persistent
		}
	}
	if _, ok := m.kv[key]; !ok {
		if _, ok := m.tombs[key]; !ok {
			i, _ := slices.BinarySearch(m.keys, key)
			m.keys = slices.Insert(m.keys, i, key)
		}
	}
	m.kv[key] = memEntry{data: bytes.Clone(data), version: v, lease: lease}
	delete(m.tombs, key)
	if lease != "" {
		m.leases[lease].keys[key] = struct{}{}
	}
}

// Txn implements Store. Its writes share one new version.
func (m *MemStore) Txn(ctx context.Context, ops []TxnOp) (TxnResult, error) {
	if err := CheckTxn(ops); err != nil {
		return TxnResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return TxnResult{}, err
	}
	writes := false
	for i, op := range ops {
		switch op.Kind {
		case TxnCheck, TxnCAS:
			if m.kv[op.Key].version != op.Version {
				return TxnResult{Failed: i, Current: m.getLocked(op.Key)}, nil
			}
			writes = writes || op.Kind == TxnCAS
		case TxnPutEphemeral:
			if _, ok := m.leases[op.Lease.ID()]; !ok {
				return TxnResult{}, ErrLeaseNotFound
			}
			writes = true
		}
	}
	res := TxnResult{OK: true}
	if writes {
		res.Version = m.bump()
	}
	for _, op := range ops {
		switch op.Kind {
		case TxnCAS:
			m.putAtLocked(op.Key, op.Data, "", res.Version)
		case TxnPutEphemeral:
			m.putAtLocked(op.Key, op.Data, op.Lease.ID(), res.Version)
		case TxnList:
			res.List, _ = m.listLocked(op.Key)
		}
	}
	return res, nil
}

// Delete implements Store.
func (m *MemStore) Delete(ctx context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return err
	}
	m.deleteLocked(key)
	return nil
}

func (m *MemStore) deleteLocked(key string) {
	e, ok := m.kv[key]
	if !ok {
		return
	}
	if e.lease != "" {
		if l := m.leases[e.lease]; l != nil {
			delete(l.keys, key)
		}
	}
	delete(m.kv, key)
	m.tombs[key] = m.bump()
}

// Wait implements Store.
func (m *MemStore) Wait(ctx context.Context, key string, after uint64) (Value, error) {
	for {
		m.mu.Lock()
		if err := m.check(ctx); err != nil {
			m.mu.Unlock()
			return Value{}, err
		}
		v := m.getLocked(key)
		changed := m.changed
		m.mu.Unlock()
		if v.Version != after {
			return v, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Value{}, ctx.Err()
		}
	}
}

// List implements Store. The index is the highest version or deletion index
// under prefix, as Consul's X-Consul-Index for a KV list.
func (m *MemStore) List(ctx context.Context, prefix string) ([]KeyValue, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return nil, 0, err
	}
	kvs, idx := m.listLocked(prefix)
	return kvs, idx, nil
}

func (m *MemStore) listLocked(prefix string) ([]KeyValue, uint64) {
	var kvs []KeyValue
	var idx uint64
	i, _ := slices.BinarySearch(m.keys, prefix)
	for _, k := range m.keys[i:] {
		if !strings.HasPrefix(k, prefix) {
			break
		}
		if e, ok := m.kv[k]; ok {
			kvs = append(kvs, KeyValue{Key: k, Data: bytes.Clone(e.data), Version: e.version})
			idx = max(idx, e.version)
		} else {
			idx = max(idx, m.tombs[k])
		}
	}
	return kvs, idx
}

// WaitPrefix implements Store.
func (m *MemStore) WaitPrefix(ctx context.Context, prefix string, after uint64) ([]KeyValue, uint64, error) {
	for {
		m.mu.Lock()
		if err := m.check(ctx); err != nil {
			m.mu.Unlock()
			return nil, 0, err
		}
		kvs, idx := m.listLocked(prefix)
		changed := m.changed
		m.mu.Unlock()
		if idx != after {
			return kvs, idx, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// memLease is a MemStore lease. Its fields other than the immutable ones are
// guarded by the store's mu.
type memLease struct {
	store *MemStore
	id    string
	ttl   time.Duration

	// guarded by store.mu:
	timer Timer
	keys  map[string]struct{}
}

// Grant implements Store.
func (m *MemStore) Grant(ctx context.Context, ttl time.Duration) (Lease, error) {
	if ttl <= 0 || ttl > MaxLeaseTTL {
		return nil, fmt.Errorf("grant lease: ttl %v out of range", ttl)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	l := &memLease{store: m, id: newID(), ttl: ttl, keys: make(map[string]struct{})}
	m.leases[l.id] = l
	m.armLocked(l)
	return l, nil
}

func (m *MemStore) armLocked(l *memLease) {
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timer = m.clock.AfterFunc(l.ttl, func() { m.expire(l) })
}

// expire revokes l if its timer was not re-armed meanwhile.
func (m *MemStore) expire(l *memLease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[l.id] == l {
		m.revokeLocked(l)
	}
}

func (m *MemStore) revokeLocked(l *memLease) {
	if l.timer != nil {
		l.timer.Stop()
	}
	delete(m.leases, l.id)
	keys := make([]string, 0, len(l.keys))
	for k := range l.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		m.deleteLocked(k)
	}
}

// renew re-arms the lease named id.
func (m *MemStore) renew(ctx context.Context, id string) error {
	return m.withLease(ctx, id, m.armLocked)
}

// revoke ends the lease named id.
func (m *MemStore) revoke(ctx context.Context, id string) error {
	return m.withLease(ctx, id, m.revokeLocked)
}

// withLease runs f on the live lease named id with mu held; an unknown id is
// ErrLeaseNotFound.
func (m *MemStore) withLease(ctx context.Context, id string, f func(*memLease)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return err
	}
	l, ok := m.leases[id]
	if !ok {
		return ErrLeaseNotFound
	}
	f(l)
	return nil
}

// PutEphemeral implements Store.
func (m *MemStore) PutEphemeral(ctx context.Context, lease Lease, key string, data []byte) error {
	return m.putEphemeral(ctx, lease.ID(), key, data)
}

func (m *MemStore) putEphemeral(ctx context.Context, leaseID, key string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return err
	}
	if _, ok := m.leases[leaseID]; !ok {
		return ErrLeaseNotFound
	}
	m.putLocked(key, data, leaseID)
	return nil
}

// Close stops every lease timer and fails every call, pending waits included.
func (m *MemStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	for _, l := range m.leases {
		l.timer.Stop()
	}
	m.closed = true
	close(m.changed)
	m.changed = make(chan struct{})
	return nil
}

// ID implements Lease.
func (l *memLease) ID() string { return l.id }

// TTL implements Lease.
func (l *memLease) TTL() time.Duration { return l.ttl }

// Renew implements Lease.
func (l *memLease) Renew(ctx context.Context) error { return l.store.renew(ctx, l.id) }

// KeepAlive implements Lease.
func (l *memLease) KeepAlive(ctx context.Context) error { return keepAlive(ctx, l.store.clock, l) }

// Revoke implements Lease.
func (l *memLease) Revoke(ctx context.Context) error { return l.store.revoke(ctx, l.id) }

func newID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return hex.EncodeToString(b)
}
