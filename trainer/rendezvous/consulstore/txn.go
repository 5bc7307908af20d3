package consulstore

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	capi "github.com/hashicorp/consul/api"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// Consul's texts for a transaction op whose version did not match: a cas
// ("index is stale"), a check-index on a changed key ("current modify
// index") or a missing one ("doesn't exist"), a check-not-exists on a
// present key ("exists"). And for a lock another session holds, or that is
// under lock delay.
var (
	mismatchTexts = []string{"index is stale", "current modify index", "doesn't exist", "exists"}
	refusedTexts  = []string{"lock is already held", "due to lock delay"}
)

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// Txn implements rendezvous.Store with one /v1/txn request: a check is a
// "check-index" ("check-not-exists" for version 0), a compare-and-set a
// "cas", a put_ephemeral a "lock" with the lease's session, a list a
// "get-tree". A lock another session holds is taken over as PutEphemeral
// does, and the transaction retried. A version that did not match costs one
// more read, for the current value (Consul answers a failed transaction
// with errors only).
func (s *Store) Txn(ctx context.Context, ops []rendezvous.TxnOp) (rendezvous.TxnResult, error) {
	if err := rendezvous.CheckTxn(ops); err != nil {
		return rendezvous.TxnResult{}, err
	}
	tops := make(capi.TxnOps, len(ops))
	locked := "" // the key of the lock, for the take-over
	for i, op := range ops {
		kv := &capi.KVTxnOp{Key: s.full(op.Key)}
		switch op.Kind {
		case rendezvous.TxnCheck:
			kv.Verb, kv.Index = capi.KVCheckIndex, op.Version
			if op.Version == 0 {
				kv.Verb = capi.KVCheckNotExists
			}
		case rendezvous.TxnCAS:
			kv.Verb, kv.Value, kv.Index = capi.KVCAS, op.Data, op.Version
		case rendezvous.TxnPutEphemeral:
			ml, err := s.ownLease(op.Lease, op.Key)
			if err != nil {
				return rendezvous.TxnResult{}, err
			}
			kv.Verb, kv.Value, kv.Session = capi.KVLock, op.Data, ml.id
			locked = op.Key
		case rendezvous.TxnList:
			kv.Verb = capi.KVGetTree
		}
		tops[i] = &capi.TxnOp{KV: kv}
	}
	var res rendezvous.TxnResult
	err := s.takingOver(ctx, locked, func() (held *refusal, err error) {
		err = s.again(ctx, func() (err error) {
			res, held, err = s.txnOnce(ctx, ops, tops)
			return err
		})
		return held, err
	})
	return res, err
}

// txnOnce sends the transaction once. It returns why a lock was refused,
// when that is all that failed.
func (s *Store) txnOnce(ctx context.Context, ops []rendezvous.TxnOp, tops capi.TxnOps) (rendezvous.TxnResult, *refusal, error) {
	cctx, cancel, err := s.call(ctx, s.cfg.RequestTimeout)
	if err != nil {
		return rendezvous.TxnResult{}, nil, err
	}
	defer cancel()
	ok, resp, _, err := s.client.Txn().Txn(tops, (&capi.QueryOptions{}).WithContext(cctx))
	if err != nil {
		return rendezvous.TxnResult{}, nil, s.fail(ctx, "transaction", err)
	}
	if ok {
		res, err := s.txnResults(ops, resp.Results)
		return res, nil, err
	}
	// Version mismatches first: the caller decides again on the current
	// value, and a lock refused meanwhile is dealt with next time.
	var refusedAt = -1
	for _, e := range resp.Errors {
		if e.OpIndex < 0 || e.OpIndex >= len(ops) {
			return rendezvous.TxnResult{}, nil, fmt.Errorf("consul transaction: error names op %d of %d: %s", e.OpIndex, len(ops), e.What)
		}
		op := ops[e.OpIndex]
		switch {
		case (op.Kind == rendezvous.TxnCheck || op.Kind == rendezvous.TxnCAS) && containsAny(e.What, mismatchTexts):
			cur, err := s.Get(ctx, op.Key)
			if err != nil {
				return rendezvous.TxnResult{}, nil, err
			}
			return rendezvous.TxnResult{Failed: e.OpIndex, Current: cur}, nil, nil
		case op.Kind == rendezvous.TxnPutEphemeral && isInvalidSession(e.What):
			return rendezvous.TxnResult{}, nil, fmt.Errorf("consul transaction: put ephemeral %s: %w", op.Key, rendezvous.ErrLeaseNotFound)
		case op.Kind == rendezvous.TxnPutEphemeral && containsAny(e.What, refusedTexts):
			refusedAt = e.OpIndex
		default:
			return rendezvous.TxnResult{}, nil, fmt.Errorf("consul transaction: op %d (%s %s): %s", e.OpIndex, op.Kind, op.Key, e.What)
		}
	}
	if refusedAt < 0 {
		return rendezvous.TxnResult{}, nil, fmt.Errorf("consul transaction failed without errors")
	}
	op := ops[refusedAt]
	held, err := s.refused(ctx, tops[refusedAt].KV.Session, op.Key)
	return rendezvous.TxnResult{}, held, err
}

// txnResults maps a committed transaction's results onto its ops: one for
// a check-index, a cas and a lock, none for a check-not-exists, the rest
// for the get-tree (the last op).
func (s *Store) txnResults(ops []rendezvous.TxnOp, results capi.TxnResults) (rendezvous.TxnResult, error) {
	res := rendezvous.TxnResult{OK: true}
	next := func() (*capi.KVPair, error) {
		if len(results) == 0 || results[0].KV == nil {
			return nil, fmt.Errorf("consul transaction: too few results")
		}
		kv := results[0].KV
		results = results[1:]
		return kv, nil
	}
	for _, op := range ops {
		switch {
		case op.Kind == rendezvous.TxnCheck && op.Version == 0:
		case op.Kind == rendezvous.TxnCheck:
			if _, err := next(); err != nil {
				return rendezvous.TxnResult{}, err
			}
			s.remember(op.Key, op.Version, op.Version)
		case op.Kind == rendezvous.TxnCAS || op.Kind == rendezvous.TxnPutEphemeral:
			kv, err := next()
			if err != nil {
				return rendezvous.TxnResult{}, err
			}
			res.Version = max(res.Version, kv.ModifyIndex)
			if op.Kind == rendezvous.TxnCAS {
				s.remember(op.Key, kv.ModifyIndex, kv.ModifyIndex)
			}
		case op.Kind == rendezvous.TxnList:
			res.List = make([]rendezvous.KeyValue, 0, len(results))
			for _, r := range results {
				if r.KV == nil {
					return rendezvous.TxnResult{}, fmt.Errorf("consul transaction: a list result without a key")
				}
				res.List = append(res.List, rendezvous.KeyValue{
					Key:     strings.TrimPrefix(r.KV.Key, s.cfg.Prefix),
					Data:    bytes.Clone(r.KV.Value),
					Version: r.KV.ModifyIndex,
				})
			}
			results = nil
		}
	}
	// A key checked absent blocks, in a later Wait, on the KV index, which
	// the transaction's writes moved to their version.
	for _, op := range ops {
		if op.Kind == rendezvous.TxnCheck && op.Version == 0 && res.Version > 0 {
			s.remember(op.Key, 0, res.Version)
		}
	}
	return res, nil
}
