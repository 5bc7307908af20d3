package rendezvous

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// The embedded store's wire protocol: after the auth handshake, each side
// sends frames of a 4-byte big-endian length followed by that many bytes of
// JSON. The client sends requests, each with an ID it chose; the server
// answers each with a response carrying the same ID, in any order, so a
// blocking wait does not hold up other calls on the connection.

// maxFrame bounds a frame's body; the rendezvous state is small.
const maxFrame = 1 << 20

// maxTTL is the longest lease a client may ask for (Consul's limit too).
const maxTTL = 24 * time.Hour

// errFrame marks malformed input from the peer.
var errFrame = errors.New("malformed frame")

// Operations a request names.
const (
	opGet          = "get"
	opCAS          = "cas"
	opDelete       = "delete"
	opWait         = "wait"
	opList         = "list"
	opWaitPrefix   = "wait_prefix"
	opGrant        = "grant"
	opPutEphemeral = "put_ephemeral"
	opRenew        = "renew"
	opRevoke       = "revoke"
	opTxn          = "txn"
	opCancel       = "cancel" // abandon the request named by Target
	opPing         = "ping"
)

var knownOps = map[string]bool{
	opGet: true, opCAS: true, opDelete: true, opWait: true, opList: true,
	opWaitPrefix: true, opGrant: true, opPutEphemeral: true, opRenew: true,
	opRevoke: true, opTxn: true, opCancel: true, opPing: true,
}

// maxTxnOps bounds a transaction (Consul allows 128 ops).
const maxTxnOps = 64

// wireTxnOp is a TxnOp on the wire; the lease is named by its ID.
type wireTxnOp struct {
	Kind    TxnKind `json:"kind"`
	Key     string  `json:"key"`
	Data    []byte  `json:"data,omitempty"`
	Version uint64  `json:"version,omitempty"`
	Lease   string  `json:"lease,omitempty"`
}

// request is one call from a client.
type request struct {
	ID      uint64      `json:"id"`
	Op      string      `json:"op"`
	Key     string      `json:"key,omitempty"`
	Data    []byte      `json:"data,omitempty"`
	Version uint64      `json:"version,omitempty"` // CAS expected version, wait "after"
	Lease   string      `json:"lease,omitempty"`
	TTLms   int64       `json:"ttl_ms,omitempty"`  // grant
	WaitMs  int64       `json:"wait_ms,omitempty"` // longest the server holds a wait
	Target  uint64      `json:"target,omitempty"`  // cancel
	Ops     []wireTxnOp `json:"ops,omitempty"`     // txn
}

// Error codes carried in responses so that sentinel errors survive the wire.
const (
	codeLeaseNotFound = "lease_not_found"
	codeClosed        = "closed"
	codeOther         = "error"
)

// response answers the request with the same ID.
type response struct {
	ID      uint64     `json:"id"`
	Code    string     `json:"code,omitempty"` // empty: success
	Err     string     `json:"err,omitempty"`
	Data    []byte     `json:"data,omitempty"`
	Version uint64     `json:"version,omitempty"`
	OK      bool       `json:"ok,omitempty"`
	Index   uint64     `json:"index,omitempty"`
	KVs     []KeyValue `json:"kvs,omitempty"`
	Lease   string     `json:"lease,omitempty"`
	TTLms   int64      `json:"ttl_ms,omitempty"`
	Failed  int        `json:"failed,omitempty"` // txn: the op that did not match
}

// readFrame reads one frame body.
func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > maxFrame {
		return nil, fmt.Errorf("%w: length %d", errFrame, n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("read frame body: %w", err)
	}
	return body, nil
}

// appendFrame encodes v as one frame.
func encodeFrame(v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode frame: %w", err)
	}
	if len(body) > maxFrame {
		return nil, fmt.Errorf("%w: length %d over %d", errFrame, len(body), maxFrame)
	}
	out := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(out, uint32(len(body)))
	return append(out, body...), nil
}

// decodeRequest parses and validates a request body.
func decodeRequest(body []byte) (request, error) {
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		return request{}, fmt.Errorf("%w: %v", errFrame, err)
	}
	if !knownOps[req.Op] {
		return request{}, fmt.Errorf("%w: unknown op %q", errFrame, req.Op)
	}
	if req.ID == 0 {
		return request{}, fmt.Errorf("%w: request without id", errFrame)
	}
	if req.TTLms < 0 || req.WaitMs < 0 || req.TTLms > maxTTL.Milliseconds() {
		return request{}, fmt.Errorf("%w: duration out of range", errFrame)
	}
	if len(req.Ops) > maxTxnOps {
		return request{}, fmt.Errorf("%w: %d transaction ops, at most %d", errFrame, len(req.Ops), maxTxnOps)
	}
	return req, nil
}

// decodeResponse parses a response body.
func decodeResponse(body []byte) (response, error) {
	var resp response
	if err := json.Unmarshal(body, &resp); err != nil {
		return response{}, fmt.Errorf("%w: %v", errFrame, err)
	}
	if resp.ID == 0 {
		return response{}, fmt.Errorf("%w: response without id", errFrame)
	}
	return resp, nil
}

// errorCode maps an error onto the wire.
func errorCode(err error) string {
	switch {
	case errors.Is(err, ErrLeaseNotFound):
		return codeLeaseNotFound
	case errors.Is(err, ErrClosed):
		return codeClosed
	default:
		return codeOther
	}
}

// respErr turns a response's error back into an error, keeping sentinels.
func (r response) respErr() error {
	switch r.Code {
	case "":
		return nil
	case codeLeaseNotFound:
		return fmt.Errorf("server: %w", ErrLeaseNotFound)
	case codeClosed:
		return fmt.Errorf("server: %w", ErrClosed)
	default:
		return fmt.Errorf("server: %s", r.Err)
	}
}
