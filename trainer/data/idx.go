package data

import (
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The IDX format (LeCun's MNIST files): two zero bytes, a type byte, a
// dimension count byte, then one big-endian uint32 per dimension, then the
// elements in row-major order, big-endian. The first dimension counts the
// records; the others shape one record.

// IDX element types.
const (
	IDXUint8   = 0x08
	IDXInt8    = 0x09
	IDXInt16   = 0x0B
	IDXInt32   = 0x0C
	IDXFloat32 = 0x0D
	IDXFloat64 = 0x0E
)

// ErrIDX is wrapped by the errors of malformed IDX files.
var ErrIDX = errors.New("malformed IDX file")

// maxIDXDims bounds the dimension count a header may claim.
const maxIDXDims = 8

// maxIDXRecord bounds the size of one record.
const maxIDXRecord = 1 << 30

// IDXHeader is the decoded head of an IDX file.
type IDXHeader struct {
	Type byte  // one of the IDX* element types
	Dims []int // Dims[0] is the number of records
}

// ElemSize is the size in bytes of one element of type t, or 0 for a type
// that is not an IDX type.
func ElemSize(t byte) int {
	switch t {
	case IDXUint8, IDXInt8:
		return 1
	case IDXInt16:
		return 2
	case IDXInt32, IDXFloat32:
		return 4
	case IDXFloat64:
		return 8
	}
	return 0
}

// RecordSize is the size in bytes of one record (all dimensions but the
// first).
func (h IDXHeader) RecordSize() int {
	n := ElemSize(h.Type)
	for _, d := range h.Dims[1:] {
		n *= d
	}
	return n
}

// Len is the number of records.
func (h IDXHeader) Len() int { return h.Dims[0] }

// headerSize is the length of the encoded header.
func (h IDXHeader) headerSize() int64 { return int64(4 + 4*len(h.Dims)) }

// ReadIDXHeader decodes an IDX header from r. It rejects unknown types, no
// dimensions, and shapes whose record or total size overflows.
func ReadIDXHeader(r io.Reader) (IDXHeader, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return IDXHeader{}, fmt.Errorf("%w: read magic: %w", ErrIDX, err)
	}
	if head[0] != 0 || head[1] != 0 {
		return IDXHeader{}, fmt.Errorf("%w: magic %x does not start with two zero bytes", ErrIDX, head)
	}
	h := IDXHeader{Type: head[2]}
	if ElemSize(h.Type) == 0 {
		return IDXHeader{}, fmt.Errorf("%w: unknown element type 0x%02x", ErrIDX, h.Type)
	}
	nd := int(head[3])
	if nd < 1 || nd > maxIDXDims {
		return IDXHeader{}, fmt.Errorf("%w: %d dimensions", ErrIDX, nd)
	}
	raw := make([]byte, 4*nd)
	if _, err := io.ReadFull(r, raw); err != nil {
		return IDXHeader{}, fmt.Errorf("%w: read dimensions: %w", ErrIDX, err)
	}
	// A record must fit in memory and the file must be addressable, even
	// when the record count is zero.
	rec := int64(ElemSize(h.Type))
	for i := 0; i < nd; i++ {
		d := int64(binary.BigEndian.Uint32(raw[4*i:]))
		h.Dims = append(h.Dims, int(d))
		if i == 0 {
			continue
		}
		if rec *= d; rec > maxIDXRecord {
			return IDXHeader{}, fmt.Errorf("%w: records over %d bytes", ErrIDX, maxIDXRecord)
		}
	}
	if rec > 0 && int64(h.Dims[0]) > (1<<40)/rec {
		return IDXHeader{}, fmt.Errorf("%w: file over 1 TiB", ErrIDX)
	}
	return h, nil
}

// IDXFile is an uncompressed IDX file opened for random access to its
// records: a Source whose record i is the raw big-endian bytes of
// element i along the first dimension.
type IDXFile struct {
	IDXHeader
	f *os.File
}

// OpenIDX opens an uncompressed IDX file. A gzipped one (".gz") is refused
// with a hint: unpack it once with UnpackGzip, then open the result.
func OpenIDX(path string) (*IDXFile, error) {
	if strings.HasSuffix(path, ".gz") {
		return nil, fmt.Errorf("open IDX %s: compressed; unpack it with UnpackGzip first: %w", path, ErrIDX)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open IDX: %w", err)
	}
	h, err := ReadIDXHeader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open IDX %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open IDX %s: %w", path, err)
	}
	if want := h.headerSize() + int64(h.Len())*int64(h.RecordSize()); st.Size() != want {
		f.Close()
		return nil, fmt.Errorf("open IDX %s: %w: %d bytes, the header says %d", path, ErrIDX, st.Size(), want)
	}
	return &IDXFile{IDXHeader: h, f: f}, nil
}

// Record implements Source: it appends record i to dst with one read.
func (x *IDXFile) Record(i int, dst []byte) ([]byte, error) {
	if i < 0 || i >= x.Len() {
		return dst, fmt.Errorf("IDX record %d outside [0,%d)", i, x.Len())
	}
	n := x.RecordSize()
	dst = grow(dst, n)
	if _, err := x.f.ReadAt(dst[len(dst)-n:], x.headerSize()+int64(i)*int64(n)); err != nil {
		return dst[:len(dst)-n], fmt.Errorf("read IDX record %d: %w", i, err)
	}
	return dst, nil
}

// Close closes the file.
func (x *IDXFile) Close() error { return x.f.Close() }

// grow extends dst by n bytes (contents unspecified) and returns it.
func grow(dst []byte, n int) []byte {
	if cap(dst)-len(dst) < n {
		nd := make([]byte, len(dst), len(dst)+n)
		copy(nd, dst)
		dst = nd
	}
	return dst[:len(dst)+n]
}

// UnpackGzip decompresses the gzipped file src into dir (created if
// needed) under src's name without ".gz", unless that file already exists,
// and returns its path. The file appears atomically (written to a
// temporary name, synced, renamed), so workers racing to unpack the same
// file all end with a complete copy.
func UnpackGzip(src, dir string) (string, error) {
	dst := filepath.Join(dir, strings.TrimSuffix(filepath.Base(src), ".gz"))
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("unpack %s: %w", src, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("unpack: %w", err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		return "", fmt.Errorf("unpack %s: %w", src, err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(dst)+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("unpack %s: %w", src, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := io.Copy(tmp, zr); err != nil {
		tmp.Close()
		return "", fmt.Errorf("unpack %s: %w", src, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("unpack %s: %w", src, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("unpack %s: %w", src, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("unpack %s: %w", src, err)
	}
	return dst, nil
}
