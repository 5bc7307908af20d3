package collective

import (
	"encoding/binary"
	"fmt"
)

// Wire format. All integers are little-endian.
//
// Hello (helloSize bytes), sent by the dialing side right after
// authentication and answered by the accepting side with its own:
//
//	0  4  magic "NTCH"
//	4  2  version (1)
//	6  2  reserved, zero
//	8  4  rank
//	12 4  size (ranks in the gang)
//	16 8  rendezvous generation
//	24 4  chunk bytes (must agree on every rank)
//	28 4  reserved, zero
//
// Frame header (headerSize bytes) before every message payload:
//
//	0  2  magic "NT"
//	2  1  kind (which collective)
//	3  1  reserved, zero
//	4  8  op sequence number (counts collectives on the group)
//	12 4  part (message index within the collective)
//	16 4  payload length in bytes
//
// The receiver knows the kind, sequence number, part and (except for
// all-gather) length it expects next, so a desync is an error, never data
// silently added to the wrong place.

const (
	helloSize    = 32
	helloVersion = 1
	headerSize   = 20
	// maxFrame bounds one payload; larger all-gather blocks are refused.
	maxFrame = 1 << 30
)

var helloMagic = [4]byte{'N', 'T', 'C', 'H'}

// kind names the collective a frame belongs to.
type kind uint8

const (
	kindAllReduce kind = iota + 1
	kindBroadcast
	kindAllGather
	kindBarrier
	kindLast = kindBarrier
)

func (k kind) String() string {
	switch k {
	case kindAllReduce:
		return "all-reduce"
	case kindBroadcast:
		return "broadcast"
	case kindAllGather:
		return "all-gather"
	case kindBarrier:
		return "barrier"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// hello introduces one end of a ring connection.
type hello struct {
	Rank, Size int
	Generation uint64
	ChunkBytes int
}

func (h hello) encode() [helloSize]byte {
	var b [helloSize]byte
	copy(b[0:4], helloMagic[:])
	binary.LittleEndian.PutUint16(b[4:], helloVersion)
	binary.LittleEndian.PutUint32(b[8:], uint32(h.Rank))
	binary.LittleEndian.PutUint32(b[12:], uint32(h.Size))
	binary.LittleEndian.PutUint64(b[16:], h.Generation)
	binary.LittleEndian.PutUint32(b[24:], uint32(h.ChunkBytes))
	return b
}

// decodeHello parses a hello; it rejects anything that encode would not
// have produced.
func decodeHello(b []byte) (hello, error) {
	if len(b) != helloSize {
		return hello{}, fmt.Errorf("hello is %d bytes, want %d", len(b), helloSize)
	}
	if [4]byte(b[0:4]) != helloMagic {
		return hello{}, fmt.Errorf("bad hello magic %q", b[0:4])
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != helloVersion {
		return hello{}, fmt.Errorf("unsupported hello version %d", v)
	}
	if binary.LittleEndian.Uint16(b[6:]) != 0 || binary.LittleEndian.Uint32(b[28:]) != 0 {
		return hello{}, fmt.Errorf("hello reserved bytes are not zero")
	}
	rank := binary.LittleEndian.Uint32(b[8:])
	size := binary.LittleEndian.Uint32(b[12:])
	chunk := binary.LittleEndian.Uint32(b[24:])
	if size == 0 || size > 1<<20 || rank >= size {
		return hello{}, fmt.Errorf("hello rank %d of size %d is out of range", rank, size)
	}
	if chunk == 0 || chunk > maxFrame {
		return hello{}, fmt.Errorf("hello chunk size %d is out of range", chunk)
	}
	return hello{
		Rank:       int(rank),
		Size:       int(size),
		Generation: binary.LittleEndian.Uint64(b[16:]),
		ChunkBytes: int(chunk),
	}, nil
}

// header precedes every message payload.
type header struct {
	Kind   kind
	Seq    uint64
	Part   uint32
	Length uint32
}

func (h header) encode() [headerSize]byte {
	var b [headerSize]byte
	b[0], b[1] = 'N', 'T'
	b[2] = byte(h.Kind)
	binary.LittleEndian.PutUint64(b[4:], h.Seq)
	binary.LittleEndian.PutUint32(b[12:], h.Part)
	binary.LittleEndian.PutUint32(b[16:], h.Length)
	return b
}

// decodeHeader parses a frame header; it rejects anything that encode would
// not have produced for a valid frame.
func decodeHeader(b []byte) (header, error) {
	if len(b) != headerSize {
		return header{}, fmt.Errorf("frame header is %d bytes, want %d", len(b), headerSize)
	}
	if b[0] != 'N' || b[1] != 'T' {
		return header{}, fmt.Errorf("bad frame magic %q", b[0:2])
	}
	k := kind(b[2])
	if k == 0 || k > kindLast {
		return header{}, fmt.Errorf("unknown frame kind %d", b[2])
	}
	if b[3] != 0 {
		return header{}, fmt.Errorf("frame reserved byte is %d, not zero", b[3])
	}
	h := header{
		Kind:   k,
		Seq:    binary.LittleEndian.Uint64(b[4:]),
		Part:   binary.LittleEndian.Uint32(b[12:]),
		Length: binary.LittleEndian.Uint32(b[16:]),
	}
	if h.Length > maxFrame {
		return header{}, fmt.Errorf("frame length %d exceeds %d", h.Length, maxFrame)
	}
	return h, nil
}

// expect checks a received header against the one the schedule predicts.
// want.Length < 0 accepts any length.
func (h header) expect(k kind, seq uint64, part int, length int) error {
	if h.Kind != k || h.Seq != seq || int(h.Part) != part || (length >= 0 && int(h.Length) != length) {
		return fmt.Errorf("got %v seq %d part %d len %d, want %v seq %d part %d len %d",
			h.Kind, h.Seq, h.Part, h.Length, k, seq, part, length)
	}
	return nil
}
