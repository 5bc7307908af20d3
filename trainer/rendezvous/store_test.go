package rendezvous

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// scriptedLease answers Renew from a script, then with its last entry.
type scriptedLease struct {
	ttl time.Duration

	mu     sync.Mutex
	script []error
	calls  int
}

func (l *scriptedLease) ID() string                          { return "scripted" }
func (l *scriptedLease) TTL() time.Duration                  { return l.ttl }
func (l *scriptedLease) Revoke(context.Context) error        { return nil }
func (l *scriptedLease) KeepAlive(ctx context.Context) error { return keepAlive(ctx, RealClock{}, l) }

func (l *scriptedLease) Renew(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := min(l.calls, len(l.script)-1)
	l.calls++
	return l.script[i]
}

func TestKeepAlive(t *testing.T) {
	transient := errors.New("connection hiccup")
	cases := []struct {
		name    string
		script  []error
		wantErr error // nil: runs until cancelled
	}{
		{"renews until cancelled", []error{nil}, nil},
		{"one failed renewal is retried", []error{nil, transient, nil}, nil},
		{"lease gone ends it", []error{nil, ErrLeaseNotFound}, ErrLeaseNotFound},
		{"store closed ends it", []error{ErrClosed}, ErrClosed},
		{"failing for a whole ttl ends it", []error{transient}, transient},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := &scriptedLease{ttl: 300 * time.Millisecond, script: tc.script}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := l.KeepAlive(ctx)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("keep-alive ended with %v", err)
				}
				if l.calls < 3 {
					t.Fatalf("only %d renewals in 1s with a 300ms ttl", l.calls)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			if ctx.Err() != nil {
				t.Fatal("keep-alive did not give up before the test's deadline")
			}
		})
	}
}

// A transaction's put_ephemeral moves a key held by another lease to its
// own, as PutEphemeral does: revoking the old lease leaves the key.
func TestMemStoreTxnTakesOverEphemeralKey(t *testing.T) {
	st := NewMemStore(nil)
	defer st.Close()
	ctx := context.Background()
	old, err := st.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutEphemeral(ctx, old, "alive/m1", []byte("old")); err != nil {
		t.Fatal(err)
	}
	cur, err := st.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.Txn(ctx, []TxnOp{{Kind: TxnPutEphemeral, Key: "alive/m1", Data: []byte("new"), Lease: cur}})
	if err != nil || !r.OK {
		t.Fatalf("txn: %+v, %v", r, err)
	}
	if err := old.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := st.Get(ctx, "alive/m1"); string(v.Data) != "new" || v.Version != r.Version {
		t.Fatalf("after revoking the old lease: %+v", v)
	}
	if err := cur.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := st.Get(ctx, "alive/m1"); v.Version != 0 {
		t.Fatalf("key outlived its new lease: %+v", v)
	}
}
