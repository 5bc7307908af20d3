package nn

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
)

// The state file format, version 1, all integers little-endian:
//
//	magic     "NTNN"
//	version   uint16 (1)
//	signature uint32 length, then the model's Signature() in UTF-8
//	params    uint64 count, then count float32 bit patterns
//	optimizer uint8 kind length, then Kind() ("" when saved without one)
//	steps     int64
//	state     uint64 count, then count float32 bit patterns
//	crc       uint32 CRC-32 (IEEE) of every byte before it
const (
	stateMagic   = "NTNN"
	stateVersion = 1
	maxSigLen    = 1 << 20
	chunkFloats  = 16 << 10
)

// Errors LoadState wraps; test for them with errors.Is.
var (
	// ErrNotState means the input does not start like a state file.
	ErrNotState = errors.New("not an nn state file")
	// ErrVersion means the file's format version is not one this package reads.
	ErrVersion = errors.New("unsupported nn state version")
	// ErrMismatch means the file is intact but was saved from a different
	// architecture or optimizer than the one it is being loaded into.
	ErrMismatch = errors.New("nn state does not match model")
	// ErrCorrupt means the file is truncated, fails its checksum or has
	// bytes after its end.
	ErrCorrupt = errors.New("nn state corrupt")
)

// SaveState writes m's parameters and, when opt is not nil, opt's kind,
// step count and state to w in the format above. It does not close or sync
// w; the checkpoint layer around it makes the file durable.
func SaveState(w io.Writer, m *Sequential, opt Optimizer) error {
	sw := &stateWriter{w: bufio.NewWriter(w), crc: crc32.NewIEEE()}
	sw.bytes([]byte(stateMagic))
	sw.uint(2, stateVersion)
	sig := m.Signature()
	sw.uint(4, uint64(len(sig)))
	sw.bytes([]byte(sig))
	sw.floats(m.Params())
	var kind string
	var steps int64
	var state []float32
	if opt != nil {
		kind, steps, state = opt.Kind(), opt.Steps(), opt.State()
	}
	if len(kind) > math.MaxUint8 {
		return fmt.Errorf("save nn state: optimizer kind %q is too long", kind)
	}
	sw.uint(1, uint64(len(kind)))
	sw.bytes([]byte(kind))
	sw.uint(8, uint64(steps))
	sw.floats(state)
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], sw.crc.Sum32())
	if sw.err == nil {
		_, sw.err = sw.w.Write(tail[:])
	}
	if sw.err == nil {
		sw.err = sw.w.Flush()
	}
	if sw.err != nil {
		return fmt.Errorf("save nn state: %w", sw.err)
	}
	return nil
}

// stateWriter writes through a buffer while hashing, remembering the first
// error so the encoder reads straight through.
type stateWriter struct {
	w   *bufio.Writer
	crc hash.Hash32
	err error
	buf [8]byte
}

func (s *stateWriter) bytes(b []byte) {
	if s.err != nil {
		return
	}
	s.crc.Write(b)
	_, s.err = s.w.Write(b)
}

func (s *stateWriter) uint(size int, v uint64) {
	binary.LittleEndian.PutUint64(s.buf[:], v)
	s.bytes(s.buf[:size])
}

func (s *stateWriter) floats(v []float32) {
	s.uint(8, uint64(len(v)))
	chunk := make([]byte, 0, 4*min(len(v), chunkFloats))
	for len(v) > 0 {
		n := min(len(v), chunkFloats)
		chunk = chunk[:0]
		for _, f := range v[:n] {
			chunk = binary.LittleEndian.AppendUint32(chunk, math.Float32bits(f))
		}
		s.bytes(chunk)
		v = v[n:]
	}
}

// LoadState reads a state file written by SaveState into m and, when opt is
// not nil, into opt. It checks everything (format, architecture signature,
// buffer sizes, optimizer kind, checksum, end of input) before it changes
// anything, so on error m and opt are as they were. With a nil opt any
// optimizer state in the file is checked and skipped. Errors wrap
// ErrNotState, ErrVersion, ErrMismatch or ErrCorrupt.
func LoadState(r io.Reader, m *Sequential, opt Optimizer) error {
	if err := loadState(r, m, opt); err != nil {
		return fmt.Errorf("load nn state: %w", err)
	}
	return nil
}

func loadState(r io.Reader, m *Sequential, opt Optimizer) error {
	sr := &stateReader{r: bufio.NewReader(r), crc: crc32.NewIEEE()}
	magic, err := sr.bytes("magic", len(stateMagic))
	if err != nil {
		return err
	}
	if string(magic) != stateMagic {
		return fmt.Errorf("%w: magic %q", ErrNotState, magic)
	}
	version, err := sr.uint("version", 2)
	if err != nil {
		return err
	}
	if version != stateVersion {
		return fmt.Errorf("%w: %d (this build reads %d)", ErrVersion, version, stateVersion)
	}
	sigLen, err := sr.uint("signature length", 4)
	if err != nil {
		return err
	}
	if sigLen > maxSigLen {
		return fmt.Errorf("%w: signature length %d", ErrCorrupt, sigLen)
	}
	sig, err := sr.bytes("signature", int(sigLen))
	if err != nil {
		return err
	}
	if want := m.Signature(); string(sig) != want {
		return fmt.Errorf("%w: saved from %q, loading into %q", ErrMismatch, sig, want)
	}
	params, err := sr.floats("parameters", m.NumParams())
	if err != nil {
		return err
	}
	kindLen, err := sr.uint("optimizer kind length", 1)
	if err != nil {
		return err
	}
	kind, err := sr.bytes("optimizer kind", int(kindLen))
	if err != nil {
		return err
	}
	steps, err := sr.uint("step count", 8)
	if err != nil {
		return err
	}
	var state []float32
	if opt == nil {
		// Nothing to load into; read (and checksum) whatever is there.
		state, err = sr.floats("optimizer state", -1)
	} else {
		if string(kind) != opt.Kind() {
			return fmt.Errorf("%w: optimizer saved as %q, loading into %q", ErrMismatch, kind, opt.Kind())
		}
		state, err = sr.floats("optimizer state", len(opt.State()))
	}
	if err != nil {
		return err
	}
	sum := sr.crc.Sum32()
	tail, err := sr.bytes("checksum", 4)
	if err != nil {
		return err
	}
	if got := binary.LittleEndian.Uint32(tail); got != sum {
		return fmt.Errorf("%w: checksum %08x, content hashes to %08x", ErrCorrupt, got, sum)
	}
	if _, err := sr.r.ReadByte(); err != io.EOF {
		if err != nil {
			return fmt.Errorf("read past end: %w", err)
		}
		return fmt.Errorf("%w: data after the checksum", ErrCorrupt)
	}
	copy(m.Params(), params)
	if opt != nil {
		copy(opt.State(), state)
		opt.SetSteps(int64(steps))
	}
	return nil
}

// stateReader reads while hashing and turns a short input into ErrCorrupt
// naming the field it ended in.
type stateReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	buf [8]byte
}

func (s *stateReader) fill(field string, b []byte) error {
	if _, err := io.ReadFull(s.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: truncated in %s", ErrCorrupt, field)
		}
		return fmt.Errorf("read %s: %w", field, err)
	}
	s.crc.Write(b)
	return nil
}

func (s *stateReader) bytes(field string, n int) ([]byte, error) {
	b := make([]byte, n)
	return b, s.fill(field, b)
}

func (s *stateReader) uint(field string, size int) (uint64, error) {
	clear(s.buf[:])
	if err := s.fill(field, s.buf[:size]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(s.buf[:]), nil
}

// floats reads a counted float32 block whose count must equal want; a
// negative want accepts any count but reads it in chunks, so a corrupt
// count cannot make it allocate more than the input holds.
func (s *stateReader) floats(field string, want int) ([]float32, error) {
	n, err := s.uint(field+" count", 8)
	if err != nil {
		return nil, err
	}
	if want >= 0 && n != uint64(want) {
		return nil, fmt.Errorf("%w: %s has %d values, want %d", ErrMismatch, field, n, want)
	}
	var out []float32
	if want >= 0 {
		out = make([]float32, 0, want)
	}
	chunk := make([]byte, 4*min(n, chunkFloats))
	for left := n; left > 0; {
		k := min(left, chunkFloats)
		b := chunk[:4*k]
		if err := s.fill(field, b); err != nil {
			return nil, err
		}
		for i := 0; i < len(b); i += 4 {
			out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
		}
		left -= k
	}
	return out, nil
}
