package rendezvous

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The embedded store's wire protocol: after the auth handshake, each side
// sends frames of a 4-byte big-endian length followed by that many bytes of
// body. The client sends requests, each with an ID it chose; the server
// answers each with a response carrying the same ID, in any order, so a
// blocking wait does not hold up other calls on the connection.
//
// A body is a tag byte ('q' request, 'r' response) and the fields in a
// fixed order (see appendRequest, appendResponse): unsigned integers as
// uvarints, signed ones as varints, strings and byte slices as a uvarint
// length and the bytes, lists as a uvarint count and the elements. The
// protocol is private to this package (launcher and workers run the same
// build); a compact binary body costs a fraction of what JSON decoding did.

// maxFrame bounds a frame's body; the rendezvous state is small.
const maxFrame = 1 << 20

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
	Kind    TxnKind
	Key     string
	Data    []byte
	Version uint64
	Lease   string
}

// request is one call from a client.
type request struct {
	ID      uint64
	Op      string
	Key     string
	Data    []byte
	Version uint64 // CAS expected version, wait "after"
	Lease   string
	TTLms   int64       // grant
	WaitMs  int64       // longest the server holds a wait
	Target  uint64      // cancel
	Ops     []wireTxnOp // txn
}

// Error codes carried in responses so that sentinel errors survive the wire.
const (
	codeLeaseNotFound = "lease_not_found"
	codeClosed        = "closed"
	codeOther         = "error"
)

// response answers the request with the same ID.
type response struct {
	ID      uint64
	Code    string // empty: success
	Err     string
	Data    []byte
	Version uint64
	OK      bool
	Index   uint64
	KVs     []KeyValue
	Lease   string
	TTLms   int64
	Failed  int // txn: the op that did not match
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

// frameBuffered reports whether r already holds a whole frame, which
// readFrame will return without reading from the connection.
func frameBuffered(r *bufio.Reader) bool {
	hdr, err := r.Peek(min(4, r.Buffered()))
	if err != nil || len(hdr) < 4 {
		return false
	}
	return r.Buffered() >= 4+int(binary.BigEndian.Uint32(hdr))
}

// encodeFrame encodes a request or a response as one frame.
func encodeFrame(v any) ([]byte, error) {
	out := make([]byte, 4, 128)
	switch v := v.(type) {
	case request:
		out = appendRequest(out, v)
	case response:
		out = appendResponse(out, v)
	default:
		return nil, fmt.Errorf("encode frame: %T is neither request nor response", v)
	}
	n := len(out) - 4
	if n > maxFrame {
		return nil, fmt.Errorf("%w: length %d over %d", errFrame, n, maxFrame)
	}
	binary.BigEndian.PutUint32(out, uint32(n))
	return out, nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendBytes(b, p []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(p))), p...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendRequest(b []byte, r request) []byte {
	b = append(b, 'q')
	b = binary.AppendUvarint(b, r.ID)
	b = appendString(b, r.Op)
	b = appendString(b, r.Key)
	b = appendBytes(b, r.Data)
	b = binary.AppendUvarint(b, r.Version)
	b = appendString(b, r.Lease)
	b = binary.AppendVarint(b, r.TTLms)
	b = binary.AppendVarint(b, r.WaitMs)
	b = binary.AppendUvarint(b, r.Target)
	b = binary.AppendUvarint(b, uint64(len(r.Ops)))
	for _, op := range r.Ops {
		b = binary.AppendVarint(b, int64(op.Kind))
		b = appendString(b, op.Key)
		b = appendBytes(b, op.Data)
		b = binary.AppendUvarint(b, op.Version)
		b = appendString(b, op.Lease)
	}
	return b
}

func appendResponse(b []byte, r response) []byte {
	b = append(b, 'r')
	b = binary.AppendUvarint(b, r.ID)
	b = appendString(b, r.Code)
	b = appendString(b, r.Err)
	b = appendBytes(b, r.Data)
	b = binary.AppendUvarint(b, r.Version)
	b = appendBool(b, r.OK)
	b = binary.AppendUvarint(b, r.Index)
	b = binary.AppendUvarint(b, uint64(len(r.KVs)))
	for _, kv := range r.KVs {
		b = appendString(b, kv.Key)
		b = appendBytes(b, kv.Data)
		b = binary.AppendUvarint(b, kv.Version)
	}
	b = appendString(b, r.Lease)
	b = binary.AppendVarint(b, r.TTLms)
	return binary.AppendVarint(b, int64(r.Failed))
}

// bodyReader reads the fields of a body; the first error sticks and later
// reads return zero values.
type bodyReader struct {
	b   []byte
	err error
}

func (r *bodyReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: bad %s", errFrame, what)
	}
}

func (r *bodyReader) tag(want byte) {
	if len(r.b) == 0 || r.b[0] != want {
		r.fail("tag")
		return
	}
	r.b = r.b[1:]
}

func (r *bodyReader) uvarint(what string) uint64 { return readVarint(r, what, binary.Uvarint) }

func (r *bodyReader) varint(what string) int64 { return readVarint(r, what, binary.Varint) }

// readVarint reads one varint with read (binary.Uvarint or binary.Varint).
func readVarint[T uint64 | int64](r *bodyReader, what string, read func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := read(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a length or a list's count, which cannot exceed the bytes
// left (every element takes at least one).
func (r *bodyReader) count(what string) int {
	n := r.uvarint(what)
	if n > uint64(len(r.b)) {
		r.fail(what)
		return 0
	}
	return int(n)
}

func (r *bodyReader) bytes(what string) []byte {
	n := r.count(what)
	if r.err != nil || n == 0 {
		return nil
	}
	out := make([]byte, n)
	copy(out, r.b)
	r.b = r.b[n:]
	return out
}

func (r *bodyReader) string(what string) string {
	n := r.count(what)
	if r.err != nil {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *bodyReader) bool(what string) bool {
	if r.err != nil {
		return false
	}
	if len(r.b) == 0 || r.b[0] > 1 {
		r.fail(what)
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}

// end fails a body with bytes left over.
func (r *bodyReader) end() error {
	if r.err == nil && len(r.b) > 0 {
		r.fail("trailing bytes")
	}
	return r.err
}

// decodeRequest parses and validates a request body.
func decodeRequest(body []byte) (request, error) {
	r := &bodyReader{b: body}
	r.tag('q')
	req := request{
		ID:      r.uvarint("id"),
		Op:      r.string("op"),
		Key:     r.string("key"),
		Data:    r.bytes("data"),
		Version: r.uvarint("version"),
		Lease:   r.string("lease"),
		TTLms:   r.varint("ttl"),
		WaitMs:  r.varint("wait"),
		Target:  r.uvarint("target"),
	}
	if n := r.count("ops"); n > 0 {
		if n > maxTxnOps {
			return request{}, fmt.Errorf("%w: %d transaction ops, at most %d", errFrame, n, maxTxnOps)
		}
		req.Ops = make([]wireTxnOp, n)
		for i := range req.Ops {
			req.Ops[i] = wireTxnOp{
				Kind:    TxnKind(r.varint("op kind")),
				Key:     r.string("op key"),
				Data:    r.bytes("op data"),
				Version: r.uvarint("op version"),
				Lease:   r.string("op lease"),
			}
		}
	}
	if err := r.end(); err != nil {
		return request{}, err
	}
	if !knownOps[req.Op] {
		return request{}, fmt.Errorf("%w: unknown op %q", errFrame, req.Op)
	}
	if req.ID == 0 {
		return request{}, fmt.Errorf("%w: request without id", errFrame)
	}
	if req.TTLms < 0 || req.WaitMs < 0 || req.TTLms > MaxLeaseTTL.Milliseconds() {
		return request{}, fmt.Errorf("%w: duration out of range", errFrame)
	}
	return req, nil
}

// decodeResponse parses a response body.
func decodeResponse(body []byte) (response, error) {
	r := &bodyReader{b: body}
	r.tag('r')
	resp := response{
		ID:      r.uvarint("id"),
		Code:    r.string("code"),
		Err:     r.string("err"),
		Data:    r.bytes("data"),
		Version: r.uvarint("version"),
		OK:      r.bool("ok"),
		Index:   r.uvarint("index"),
	}
	if n := r.count("kvs"); n > 0 {
		resp.KVs = make([]KeyValue, n)
		for i := range resp.KVs {
			resp.KVs[i] = KeyValue{Key: r.string("kv key"), Data: r.bytes("kv data"), Version: r.uvarint("kv version")}
		}
	}
	resp.Lease = r.string("lease")
	resp.TTLms = r.varint("ttl")
	resp.Failed = int(r.varint("failed"))
	if err := r.end(); err != nil {
		return response{}, err
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
