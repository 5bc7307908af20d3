package collective

import (
	"bytes"
	"fmt"
	"sync/atomic"
)

// Same-host transport. When both ends of a ring connection run on one host
// (and both allow it), the dialer maps a file in the shared-memory
// directory that the acceptor maps too, and bulk payloads go through it
// instead of through loopback TCP: the dialer copies a chunk straight into
// the next free slot and sends only the frame header (flagShared) on the
// stream; the acceptor reads the header, then reduces from, or copies out
// of, the slot, and returns the slot with a credit on the same connection.
// The TCP connection stays the source of every wake-up and every deadline,
// and a dead peer is still a closed socket; the shared memory is only
// memory. Nothing spins: each side blocks in a read of the stream.
//
// Slots are used in order, one message each, slot = message number mod
// slots. Credits are cumulative message counts, so a lost or merged credit
// cannot desync the ring.

// regionMagic starts the mapping; the nonce follows it.
var regionMagic = [4]byte{'N', 'T', 'S', 'M'}

// regionHeader is the space before the first slot (one page, so slots
// start page-aligned and every slot is 64-byte aligned).
const regionHeader = 4096

// shmSlots is how many chunk-sized slots a ring has: enough for window
// messages in flight on the wire and window more held by the receiver.
const shmSlots = 2 * window

// shmFilePrefix starts the name of every shared file, so a peer only ever
// opens files of ours.
const shmFilePrefix = "nomad-train-collective-"

// regionBytes is the size of a region of slots slots of slotBytes each.
func regionBytes(slots, slotBytes int) int { return regionHeader + slots*slotBytes }

// slotSize rounds chunkBytes up to a multiple of 64 bytes (cache line, and
// 8-byte alignment for float64 views).
func slotSize(chunkBytes int) int { return (chunkBytes + 63) &^ 63 }

// writeRegionHeader stamps a fresh mapping with the magic and nonce.
func writeRegionHeader(mem []byte, nonce [32]byte) {
	copy(mem[0:4], regionMagic[:])
	copy(mem[4:36], nonce[:])
}

// checkRegion verifies that mem is the region the peer announced.
func checkRegion(mem []byte, nonce [32]byte, slots, slotBytes int) error {
	if len(mem) != regionBytes(slots, slotBytes) {
		return fmt.Errorf("shared region is %d bytes, want %d", len(mem), regionBytes(slots, slotBytes))
	}
	if [4]byte(mem[0:4]) != regionMagic || !bytes.Equal(mem[4:36], nonce[:]) {
		return fmt.Errorf("shared region does not carry the announced nonce")
	}
	return nil
}

// slotOf returns slot i of a region's mapping.
func slotOf(mem []byte, slotBytes, slots int, msg uint64) []byte {
	off := regionHeader + int(msg%uint64(slots))*slotBytes
	return mem[off : off+slotBytes : off+slotBytes]
}

// shmOut is the dialer's (sending) end of a ring connection's region.
type shmOut struct {
	mem       []byte
	slots     int
	slotBytes int

	posted atomic.Uint64 // messages written; only the writer stores
	freed  atomic.Uint64 // messages the peer released; only the credit reader stores
	credit chan struct{} // capacity 1: freed moved
	gone   chan struct{} // closed when the credit stream ends
}

func newShmOut(mem []byte, slots, slotBytes int) *shmOut {
	return &shmOut{mem: mem, slots: slots, slotBytes: slotBytes,
		credit: make(chan struct{}, 1), gone: make(chan struct{})}
}

// fits reports whether a payload of n bytes goes through the region.
// Empty payloads stay on the stream: there is nothing to move.
func (o *shmOut) fits(n int) bool { return n > 0 && n <= o.slotBytes }

// full reports whether every slot holds a message the peer has not
// released.
func (o *shmOut) full() bool { return o.posted.Load()-o.freed.Load() >= uint64(o.slots) }

// next returns the slot for the next message.
func (o *shmOut) next() []byte { return slotOf(o.mem, o.slotBytes, o.slots, o.posted.Load()) }

// granted records a credit from the peer: the count of released messages.
// A credit that goes backwards or past what was posted is a protocol error.
func (o *shmOut) granted(n uint64) error {
	if n < o.freed.Load() || n > o.posted.Load() {
		return fmt.Errorf("credit %d outside [%d, %d]", n, o.freed.Load(), o.posted.Load())
	}
	o.freed.Store(n)
	select {
	case o.credit <- struct{}{}:
	default:
	}
	return nil
}

// shmIn is the acceptor's (receiving) end of a ring connection's region.
type shmIn struct {
	mem       []byte
	slots     int
	slotBytes int

	taken uint64 // messages received; only the reader touches it

	// Guarded by the caller's lock (Group.creditMu), which also orders
	// the credits on the wire.
	freed uint64 // messages released, in order
	held  []bool // released out of order, by slot
}

func newShmIn(mem []byte, slots, slotBytes int) *shmIn {
	return &shmIn{mem: mem, slots: slots, slotBytes: slotBytes, held: make([]bool, slots)}
}

// take returns the next message's payload of n bytes (a view into the
// region) and its number, for release once the payload has been used.
func (in *shmIn) take(n int) ([]byte, uint64, error) {
	if n <= 0 || n > in.slotBytes {
		return nil, 0, fmt.Errorf("shared payload of %d bytes does not fit a %d-byte slot", n, in.slotBytes)
	}
	msg := in.taken
	in.taken++
	return slotOf(in.mem, in.slotBytes, in.slots, msg)[:n], msg, nil
}

// release returns message msg's slot. Slots may be released out of order
// (the reader copies later messages out while the caller still reduces an
// earlier one); the credit only counts the unbroken run from the oldest.
// It returns the new credit and whether it moved.
func (in *shmIn) release(msg uint64) (uint64, bool) {
	in.held[msg%uint64(in.slots)] = true
	moved := false
	for in.held[in.freed%uint64(in.slots)] {
		in.held[in.freed%uint64(in.slots)] = false
		in.freed++
		moved = true
	}
	return in.freed, moved
}
