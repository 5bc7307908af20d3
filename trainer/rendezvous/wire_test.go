package rendezvous

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	reqs := []request{
		{ID: 1, Op: opGet, Key: "run/state"},
		{ID: 2, Op: opCAS, Key: "k", Data: []byte{0, 1, 2, 255}, Version: 9},
		{ID: 3, Op: opWait, Key: "k", Version: 4, WaitMs: 60000},
		{ID: 4, Op: opGrant, TTLms: 10000},
		{ID: 5, Op: opCancel, Target: 3},
		{ID: 6, Op: opTxn, Ops: []wireTxnOp{
			{Kind: TxnCheck, Key: "run/state", Version: 7},
			{Kind: TxnPutEphemeral, Key: "run/gen/1/alive/a", Data: []byte(`{"id":"a"}`), Lease: "abc"},
			{Kind: TxnList, Key: "run/gen/1/alive/"},
		}},
	}
	var stream bytes.Buffer
	for _, r := range reqs {
		f, err := encodeFrame(r)
		if err != nil {
			t.Fatal(err)
		}
		stream.Write(f)
	}
	for _, want := range reqs {
		body, err := readFrame(&stream)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRequest(body)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for _, want := range []response{
		{ID: 1, Data: []byte("v"), Version: 9},
		{ID: 2, Code: codeLeaseNotFound, Err: "lease not found"},
		{ID: 3, OK: true, Version: 12, KVs: []KeyValue{{Key: "a", Data: []byte("x"), Version: 3}, {Key: "b", Version: 12}}, Index: 12},
		{ID: 4, Lease: "abc", TTLms: 10000},
		{ID: 5, Failed: 2, Data: []byte("{}"), Version: 7},
	} {
		if got := roundTrip(t, want, decodeResponse); !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
}

func TestEncodeFrameRefusesOversize(t *testing.T) {
	_, err := encodeFrame(request{ID: 1, Op: opCAS, Data: make([]byte, maxFrame)})
	if !errors.Is(err, errFrame) {
		t.Fatalf("got %v, want errFrame", err)
	}
}

// FuzzFrameDecode feeds outside bytes to the frame reader and both decoders:
// they must not panic, must refuse oversized lengths, and whatever they
// accept must survive a re-encode unchanged.
func FuzzFrameDecode(f *testing.F) {
	for _, v := range []any{
		request{ID: 1, Op: opGet, Key: "run/state"},
		request{ID: 7, Op: opPutEphemeral, Key: "run/gen/1/alive/a", Data: []byte(`{"id":"a"}`), Lease: "abc"},
		response{ID: 2, Version: 5, OK: true, KVs: []KeyValue{{Key: "a", Data: []byte("x"), Version: 3}}},
		response{ID: 3, Code: codeLeaseNotFound, Err: "lease not found"},
		request{ID: 8, Op: opTxn, Ops: []wireTxnOp{{Kind: TxnCAS, Key: "run/state", Data: []byte("{}")}, {Kind: TxnList, Key: "run/gen/1/alive/"}}},
		response{ID: 4, Failed: 1, Version: 9, Data: []byte(`{"generation":2}`)},
	} {
		b, err := encodeFrame(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{'})
	f.Fuzz(func(t *testing.T, data []byte) {
		body, err := readFrame(bytes.NewReader(data))
		if err != nil {
			return
		}
		if n := binary.BigEndian.Uint32(data); n == 0 || n > maxFrame || int(n) != len(body) {
			t.Fatalf("frame of declared length %d accepted with body %d", n, len(body))
		}
		if req, err := decodeRequest(body); err == nil {
			if !knownOps[req.Op] || req.ID == 0 || req.TTLms < 0 || req.WaitMs < 0 {
				t.Fatalf("invalid request accepted: %+v", req)
			}
			again := roundTrip(t, req, decodeRequest)
			if !reflect.DeepEqual(normReq(again), normReq(req)) {
				t.Fatalf("request changed in a round trip: %+v -> %+v", req, again)
			}
		}
		if resp, err := decodeResponse(body); err == nil {
			again := roundTrip(t, resp, decodeResponse)
			if !reflect.DeepEqual(normResp(again), normResp(resp)) {
				t.Fatalf("response changed in a round trip: %+v -> %+v", resp, again)
			}
		}
	})
}

func roundTrip[T any](t *testing.T, v T, decode func([]byte) (T, error)) T {
	t.Helper()
	f, err := encodeFrame(v)
	if err != nil {
		t.Fatalf("re-encode %+v: %v", v, err)
	}
	body, err := readFrame(bytes.NewReader(f))
	if err != nil {
		t.Fatalf("re-read: %v", err)
	}
	out, err := decode(body)
	if err != nil {
		t.Fatalf("re-decode: %v", err)
	}
	return out
}

// A body does not tell an empty byte slice from a missing one; compare without
// that difference.
func normReq(r request) request {
	if len(r.Data) == 0 {
		r.Data = nil
	}
	return r
}

func normResp(r response) response {
	if len(r.Data) == 0 {
		r.Data = nil
	}
	if len(r.KVs) == 0 {
		r.KVs = nil
	}
	for i := range r.KVs {
		if len(r.KVs[i].Data) == 0 {
			r.KVs[i].Data = nil
		}
	}
	return r
}
