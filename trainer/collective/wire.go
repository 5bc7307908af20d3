package collective

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Wire format. All integers are little-endian.
//
// Hello (helloSize bytes), sent by the dialing side right after
// authentication and answered by the accepting side with its own:
//
//	0  4  magic "NTCH"
//	4  2  version (2: the transport agreement follows the hello)
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
//	3  1  flags: bit 0 (flagShared) says the payload is not on the
//	      stream but in the next slot of the shared-memory ring
//	4  8  op sequence number (counts collectives on the group)
//	12 4  part (message index within the collective)
//	16 4  payload length in bytes
//
// The receiver knows the kind, sequence number, part and (except for
// all-gather) length it expects next, so a desync is an error, never data
// silently added to the wrong place.
//
// Transport message (transportSize bytes), exchanged right after the hello
// on each ring connection to agree on a same-host shared-memory ring for
// the bulk data that flows dialer -> acceptor (see shm.go). The dialer sends
// an offer, the acceptor answers; when the answer agrees the dialer sends a
// region (or a region with the ok flag clear when it could not make one) and
// the acceptor acks it after mapping it.
//
//	0   4   magic "NTTM"
//	4   1   type: 1 offer, 2 answer, 3 region, 4 ack
//	5   1   flags: bit 0 (flagOK) offer: shared memory wanted; answer:
//	        agreed; region: made; ack: mapped and verified
//	6   2   reserved, zero
//	8   4   region: slots
//	12  4   region: slot bytes
//	16  32  region: nonce written at the start of the mapping
//	48  64  offer and answer: host identity (boot id), NUL-padded
//	112 144 region: path of the shared file, NUL-padded
//
// Credits flow back on the same connection (acceptor -> dialer) once shared
// memory is in use: each is 8 bytes, the number of messages whose slots the
// acceptor has released so far.

const (
	helloSize    = 32
	helloVersion = 2
	headerSize   = 20
	// maxFrame bounds one payload; larger all-gather blocks are refused.
	maxFrame = 1 << 30
	// flagShared marks a frame whose payload is in the shared-memory ring.
	flagShared = 1
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
	if err := checkFixed(b, helloSize, helloMagic, "hello"); err != nil {
		return hello{}, err
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

// checkFixed checks the length and magic of a fixed-size message.
func checkFixed(b []byte, size int, magic [4]byte, what string) error {
	if len(b) != size {
		return fmt.Errorf("%s is %d bytes, want %d", what, len(b), size)
	}
	if [4]byte(b[0:4]) != magic {
		return fmt.Errorf("bad %s magic %q", what, b[0:4])
	}
	return nil
}

// header precedes every message payload.
type header struct {
	Kind   kind
	Flags  uint8
	Seq    uint64
	Part   uint32
	Length uint32
}

func (h header) encode() [headerSize]byte {
	var b [headerSize]byte
	b[0], b[1] = 'N', 'T'
	b[2] = byte(h.Kind)
	b[3] = h.Flags
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
	if b[3]&^flagShared != 0 {
		return header{}, fmt.Errorf("frame flags %#x has unknown bits", b[3])
	}
	h := header{
		Kind:   k,
		Flags:  b[3],
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

// transportSize is the size of every transport message.
const transportSize = 256

var transportMagic = [4]byte{'N', 'T', 'T', 'M'}

// msgType names a transport message.
type msgType uint8

const (
	msgOffer msgType = iota + 1
	msgAnswer
	msgRegion
	msgAck
	msgLast = msgAck
)

// flagOK is the one transport flag: yes to whatever the message is about.
const flagOK = 1

const (
	hostIDMax = 64
	pathMax   = 144
)

// transportMsg is one step of the shared-memory agreement.
type transportMsg struct {
	Type      msgType
	OK        bool
	Slots     uint32
	SlotBytes uint32
	Nonce     [32]byte
	Host      string // at most hostIDMax bytes, no NUL
	Path      string // at most pathMax bytes, no NUL
}

func (m transportMsg) encode() [transportSize]byte {
	var b [transportSize]byte
	copy(b[0:4], transportMagic[:])
	b[4] = byte(m.Type)
	if m.OK {
		b[5] = flagOK
	}
	binary.LittleEndian.PutUint32(b[8:], m.Slots)
	binary.LittleEndian.PutUint32(b[12:], m.SlotBytes)
	copy(b[16:48], m.Nonce[:])
	copy(b[48:48+hostIDMax], m.Host)
	copy(b[112:112+pathMax], m.Path)
	return b
}

// decodeTransport parses a transport message; it rejects anything that
// encode would not have produced.
func decodeTransport(b []byte) (transportMsg, error) {
	if err := checkFixed(b, transportSize, transportMagic, "transport message"); err != nil {
		return transportMsg{}, err
	}
	t := msgType(b[4])
	if t == 0 || t > msgLast {
		return transportMsg{}, fmt.Errorf("unknown transport message type %d", b[4])
	}
	if b[5]&^flagOK != 0 || b[6] != 0 || b[7] != 0 {
		return transportMsg{}, fmt.Errorf("transport message reserved bits are not zero")
	}
	host, err := paddedString(b[48 : 48+hostIDMax])
	if err != nil {
		return transportMsg{}, fmt.Errorf("host identity: %w", err)
	}
	path, err := paddedString(b[112 : 112+pathMax])
	if err != nil {
		return transportMsg{}, fmt.Errorf("path: %w", err)
	}
	return transportMsg{
		Type:      t,
		OK:        b[5] == flagOK,
		Slots:     binary.LittleEndian.Uint32(b[8:]),
		SlotBytes: binary.LittleEndian.Uint32(b[12:]),
		Nonce:     [32]byte(b[16:48]),
		Host:      host,
		Path:      path,
	}, nil
}

// paddedString reads a NUL-padded string: text, then only NULs.
func paddedString(b []byte) (string, error) {
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		return string(b), nil
	}
	if bytes.IndexFunc(b[n:], func(r rune) bool { return r != 0 }) >= 0 {
		return "", fmt.Errorf("bytes after the NUL padding")
	}
	return string(b[:n]), nil
}
