package collective

import (
	"bytes"
	"testing"

	"github.com/shoenig/test/must"
)

func TestHelloRoundTrip(t *testing.T) {
	h := hello{Rank: 3, Size: 5, Generation: 1<<40 + 7, ChunkBytes: DefaultChunkBytes}
	b := h.encode()
	got, err := decodeHello(b[:])
	must.NoError(t, err)
	must.Eq(t, h, got)
}

func TestHelloRejects(t *testing.T) {
	good := hello{Rank: 1, Size: 2, Generation: 9, ChunkBytes: 64}.encode()
	cases := []struct {
		name string
		mut  func(b []byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:helloSize-1] }},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"version", func(b []byte) []byte { b[4] = 1; return b }},
		{"reserved", func(b []byte) []byte { b[30] = 1; return b }},
		{"rank >= size", func(b []byte) []byte { b[8] = 2; return b }},
		{"size zero", func(b []byte) []byte { b[12] = 0; return b }},
		{"chunk zero", func(b []byte) []byte { b[24] = 0; return b }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := good
			_, err := decodeHello(tc.mut(b[:]))
			must.Error(t, err)
		})
	}
}

func TestHeaderRoundTripAndRejects(t *testing.T) {
	h := header{Kind: kindAllGather, Seq: 1 << 50, Part: 12, Length: 4096}
	b := h.encode()
	got, err := decodeHeader(b[:])
	must.NoError(t, err)
	must.Eq(t, h, got)
	must.NoError(t, got.expect(kindAllGather, 1<<50, 12, 4096))
	must.NoError(t, got.expect(kindAllGather, 1<<50, 12, -1))
	must.Error(t, got.expect(kindAllGather, 1<<50+1, 12, 4096)) // another collective
	must.Error(t, got.expect(kindAllReduce, 1<<50, 12, 4096))   // another kind
	must.Error(t, got.expect(kindAllGather, 1<<50, 13, 4096))   // another part
	must.Error(t, got.expect(kindAllGather, 1<<50, 12, 4095))   // another length
	shared := header{Kind: kindAllReduce, Flags: flagShared, Seq: 3, Part: 1, Length: 64}
	b2 := shared.encode()
	got, err = decodeHeader(b2[:])
	must.NoError(t, err)
	must.Eq(t, shared, got)

	for name, mut := range map[string]func(b []byte){
		"magic":    func(b []byte) { b[1] = 'X' },
		"kind 0":   func(b []byte) { b[2] = 0 },
		"kind big": func(b []byte) { b[2] = byte(kindLast) + 1 },
		"flags":    func(b []byte) { b[3] = 2 },
		"too long": func(b []byte) { b[19] = 0xff },
	} {
		c := b
		mut(c[:])
		_, err := decodeHeader(c[:])
		must.Error(t, err, must.Sprintf("%s accepted", name))
	}
}

// FuzzDecodeWire feeds arbitrary bytes to both decoders of peer input:
// they must not panic, and whatever they accept must re-encode to the same
// bytes (so nothing is silently ignored).
func FuzzDecodeWire(f *testing.F) {
	h := hello{Rank: 1, Size: 4, Generation: 3, ChunkBytes: 1 << 19}.encode()
	f.Add(h[:])
	fr := header{Kind: kindAllReduce, Seq: 5, Part: 2, Length: 100}.encode()
	f.Add(fr[:])
	f.Add([]byte{})
	tm := transportMsg{Type: msgRegion, OK: true, Slots: 8, SlotBytes: 1 << 18, Nonce: [32]byte{1, 2}, Host: "boot", Path: "/dev/shm/x"}.encode()
	f.Add(tm[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := decodeHello(b); err == nil {
			e := h.encode()
			if !bytes.Equal(e[:], b) {
				t.Fatalf("hello %x decoded to %+v, re-encodes as %x", b, h, e)
			}
		}
		if h, err := decodeHeader(b); err == nil {
			e := h.encode()
			if !bytes.Equal(e[:], b) {
				t.Fatalf("header %x decoded to %+v, re-encodes as %x", b, h, e)
			}
		}
		if m, err := decodeTransport(b); err == nil {
			e := m.encode()
			if !bytes.Equal(e[:], b) {
				t.Fatalf("transport message %x decoded to %+v, re-encodes as %x", b, m, e)
			}
		}
	})
}

func TestTransportMsgRoundTripAndRejects(t *testing.T) {
	msgs := []transportMsg{
		{Type: msgOffer, OK: true, Host: "0f4c6a2e-5b1d-4c3e-9a7f-2d8e1b6c3a90"},
		{Type: msgAnswer},
		{Type: msgRegion, OK: true, Slots: 8, SlotBytes: 1 << 18, Nonce: [32]byte{9, 8, 7}, Path: "/dev/shm/nomad-train-collective-123"},
		{Type: msgAck, OK: true},
		{Type: msgOffer, OK: true, Host: string(bytes.Repeat([]byte{'h'}, hostIDMax)), Path: string(bytes.Repeat([]byte{'p'}, pathMax))},
	}
	for _, m := range msgs {
		b := m.encode()
		got, err := decodeTransport(b[:])
		must.NoError(t, err)
		must.Eq(t, m, got)
	}
	good := msgs[0].encode()
	for name, mut := range map[string]func(b []byte){
		"magic":        func(b []byte) { b[0] = 'X' },
		"type 0":       func(b []byte) { b[4] = 0 },
		"type big":     func(b []byte) { b[4] = byte(msgLast) + 1 },
		"flags":        func(b []byte) { b[5] = 2 },
		"reserved":     func(b []byte) { b[7] = 1 },
		"host garbage": func(b []byte) { b[48+hostIDMax-1] = 'x' }, // text after the NUL padding
		"path garbage": func(b []byte) { b[transportSize-1] = 'x' },
	} {
		c := good
		mut(c[:])
		_, err := decodeTransport(c[:])
		must.Error(t, err, must.Sprintf("%s accepted", name))
	}
	_, err := decodeTransport(good[:10])
	must.Error(t, err)
}
