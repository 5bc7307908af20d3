package driver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Bounds on the msgpack a task or the agent hands the driver. The cty
// decoder trusts the length in an array or map header and allocates for it
// before it reads a single element: 20 bytes claiming 3.1e9 elements took the
// plugin (root, on every client) down with "runtime: out of memory". So the
// driver walks the bytes first and refuses what cannot be real.
const (
	// maxMsgpackBytes is far above any config block Nomad sends (its gRPC
	// messages stop at 4 MiB).
	maxMsgpackBytes = 8 << 20
	// maxMsgpackElems bounds the values in one document: cty spends about a
	// hundred bytes on each, so a megabyte of one-byte elements stays small.
	maxMsgpackElems = 1 << 16
	// maxMsgpackDepth bounds nesting: the task config is three levels deep,
	// and the decoders recurse once per level.
	maxMsgpackDepth = 32
)

// errMsgpackBounds is the cause of every refusal by checkMsgpack.
var errMsgpackBounds = errors.New("msgpack out of bounds")

// checkMsgpack verifies that b is exactly one well-formed msgpack value
// whose every length fits in the bytes that follow it, with at most
// maxMsgpackElems values nested at most maxMsgpackDepth deep and no NaN. Only then may
// a decoder that allocates by declared lengths see it.
func checkMsgpack(b []byte) error {
	if len(b) > maxMsgpackBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", errMsgpackBounds, len(b), maxMsgpackBytes)
	}
	w := msgpackWalker{b: b}
	if err := w.value(0); err != nil {
		return err
	}
	if w.off != len(b) {
		return fmt.Errorf("%w: %d bytes after the value", errMsgpackBounds, len(b)-w.off)
	}
	return nil
}

type msgpackWalker struct {
	b     []byte
	off   int
	elems int
}

func (w *msgpackWalker) remaining() int { return len(w.b) - w.off }

// take consumes n bytes, failing when fewer are left.
func (w *msgpackWalker) take(n uint64) ([]byte, error) {
	if n > uint64(w.remaining()) {
		return nil, fmt.Errorf("%w: %d bytes declared at offset %d, %d left", errMsgpackBounds, n, w.off, w.remaining())
	}
	p := w.b[w.off : w.off+int(n)]
	w.off += int(n)
	return p, nil
}

// length reads a big-endian length of size bytes (1, 2 or 4).
func (w *msgpackWalker) length(size int) (uint64, error) {
	p, err := w.take(uint64(size))
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	default:
		return uint64(binary.BigEndian.Uint32(p)), nil
	}
}

// value walks one value at nesting depth.
func (w *msgpackWalker) value(depth int) error {
	if depth > maxMsgpackDepth {
		return fmt.Errorf("%w: nested deeper than %d", errMsgpackBounds, maxMsgpackDepth)
	}
	if w.elems++; w.elems > maxMsgpackElems {
		return fmt.Errorf("%w: more than %d values", errMsgpackBounds, maxMsgpackElems)
	}
	p, err := w.take(1)
	if err != nil {
		return err
	}
	c := p[0]
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3: // fixint, nil, bool
		return nil
	case c >= 0x80 && c <= 0x8f:
		return w.children(uint64(c&0x0f), 2, depth)
	case c >= 0x90 && c <= 0x9f:
		return w.children(uint64(c&0x0f), 1, depth)
	case c >= 0xa0 && c <= 0xbf:
		_, err := w.take(uint64(c & 0x1f))
		return err
	}
	switch c {
	case 0xcc, 0xd0: // uint8, int8
		_, err = w.take(1)
	case 0xcd, 0xd1: // uint16, int16
		_, err = w.take(2)
	case 0xce, 0xd2: // uint32, int32
		_, err = w.take(4)
	case 0xcf, 0xd3: // uint64, int64
		_, err = w.take(8)
	case 0xca, 0xcb: // float32, float64
		err = w.float(c)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16: type byte + data
		_, err = w.take(1 + 1<<(c-0xd4))
	case 0xc4, 0xd9: // bin8, str8
		err = w.sized(1, 0)
	case 0xc5, 0xda: // bin16, str16
		err = w.sized(2, 0)
	case 0xc6, 0xdb: // bin32, str32
		err = w.sized(4, 0)
	case 0xc7: // ext8, ext16, ext32: length, type byte, data
		err = w.sized(1, 1)
	case 0xc8:
		err = w.sized(2, 1)
	case 0xc9:
		err = w.sized(4, 1)
	case 0xdc: // array16, array32
		err = w.container(2, 1, depth)
	case 0xdd:
		err = w.container(4, 1, depth)
	case 0xde: // map16, map32
		err = w.container(2, 2, depth)
	case 0xdf:
		err = w.container(4, 2, depth)
	default: // 0xc1 is never used
		err = fmt.Errorf("%w: invalid type byte 0x%02x at offset %d", errMsgpackBounds, c, w.off-1)
	}
	return err
}

// float skips a float, refusing NaN: cty has no NaN, and its decoder
// panics on one (math/big: "Float.SetFloat64(NaN)"), which took the plugin
// down.
func (w *msgpackWalker) float(c byte) error {
	if c == 0xca {
		p, err := w.take(4)
		if err == nil && math.IsNaN(float64(math.Float32frombits(binary.BigEndian.Uint32(p)))) {
			err = fmt.Errorf("%w: NaN at offset %d", errMsgpackBounds, w.off-5)
		}
		return err
	}
	p, err := w.take(8)
	if err == nil && math.IsNaN(math.Float64frombits(binary.BigEndian.Uint64(p))) {
		err = fmt.Errorf("%w: NaN at offset %d", errMsgpackBounds, w.off-9)
	}
	return err
}

// sized skips a length-prefixed payload with extra header bytes after the
// length (the ext type byte).
func (w *msgpackWalker) sized(lenSize int, extra uint64) error {
	n, err := w.length(lenSize)
	if err != nil {
		return err
	}
	_, err = w.take(extra + n)
	return err
}

func (w *msgpackWalker) container(lenSize int, per uint64, depth int) error {
	n, err := w.length(lenSize)
	if err != nil {
		return err
	}
	return w.children(n, per, depth)
}

// children walks n entries of per values each (2 for a map's key and
// value), after checking that the bytes left can hold them at one byte each.
func (w *msgpackWalker) children(n, per uint64, depth int) error {
	if n*per > uint64(w.remaining()) {
		return fmt.Errorf("%w: %d elements declared at offset %d, %d bytes left", errMsgpackBounds, n*per, w.off, w.remaining())
	}
	if n*per > uint64(maxMsgpackElems-w.elems) {
		return fmt.Errorf("%w: more than %d values", errMsgpackBounds, maxMsgpackElems)
	}
	for i := uint64(0); i < n*per; i++ {
		if err := w.value(depth + 1); err != nil {
			return err
		}
	}
	return nil
}
