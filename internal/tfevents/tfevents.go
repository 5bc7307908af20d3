// Package tfevents writes TensorBoard event files: a sequence of records
// in the TFRecord framing, each an Event protocol buffer, the first
// naming the file's version and the others carrying scalar summaries,
// which TensorBoard's scalar dashboard plots against the step.
//
// The framing of a record: its length as a little-endian uint64, the
// masked CRC-32C of those 8 bytes, the data, and the masked CRC-32C of
// the data. A CRC is masked by rotating it right by 15 bits and adding
// 0xa282ead8.
//
// The messages, with only the fields written here (tensorflow.Event and
// tensorflow.Summary): Event{wall_time double = 1, step int64 = 2,
// file_version string = 3, summary Summary = 5}; Summary{repeated Value
// value = 1}; Value{tag string = 1, simple_value float = 2}.
//
// Encoding is deterministic: the same events give the same bytes, so a
// file rewritten from a history that only grew keeps its earlier bytes,
// and a TensorBoard reading it reads on.
package tfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// FileVersion is the version the first event of a file names, as
// TensorFlow 2 and tensorboardX write it.
const FileVersion = "brain.Event:2"

// Scalar is one tag's value at a step.
type Scalar struct {
	Tag   string
	Value float64
}

// FileName is the name TensorBoard finds an event file by
// ("tfevents" in it): events.out.tfevents.<unix seconds>.<host>.
func FileName(created time.Time, host string) string {
	return fmt.Sprintf("events.out.tfevents.%d.%s", created.Unix(), host)
}

// Writer writes events to an io.Writer, one record per call.
type Writer struct {
	w   io.Writer
	buf []byte
}

// NewWriter returns a Writer writing to w. The caller writes the
// version event first (WriteVersion).
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// WriteVersion writes the event that opens a file.
func (w *Writer) WriteVersion(wall time.Time) error {
	ev := appendWallStep(nil, wall, 0)
	ev = protowire.AppendTag(ev, 3, protowire.BytesType)
	ev = protowire.AppendString(ev, FileVersion)
	return w.writeRecord(ev)
}

// WriteScalars writes one event holding values at step. A value that a
// float32 cannot hold becomes ±Inf, as TensorBoard's own writers make it.
func (w *Writer) WriteScalars(wall time.Time, step int64, values []Scalar) error {
	var summary []byte
	for _, v := range values {
		var val []byte
		val = protowire.AppendTag(val, 1, protowire.BytesType)
		val = protowire.AppendString(val, v.Tag)
		val = protowire.AppendTag(val, 2, protowire.Fixed32Type)
		val = protowire.AppendFixed32(val, math.Float32bits(float32(v.Value)))
		summary = protowire.AppendTag(summary, 1, protowire.BytesType)
		summary = protowire.AppendBytes(summary, val)
	}
	ev := appendWallStep(nil, wall, step)
	ev = protowire.AppendTag(ev, 5, protowire.BytesType)
	ev = protowire.AppendBytes(ev, summary)
	return w.writeRecord(ev)
}

// appendWallStep appends an Event's wall time (seconds since the epoch)
// and its step; a zero step is left out, as proto3 leaves out defaults.
func appendWallStep(b []byte, wall time.Time, step int64) []byte {
	b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(float64(wall.Unix())+float64(wall.Nanosecond())/1e9))
	if step != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(step))
	}
	return b
}

// writeRecord frames data as one TFRecord and writes it in one call.
func (w *Writer) writeRecord(data []byte) error {
	b := w.buf[:0]
	b = binary.LittleEndian.AppendUint64(b, uint64(len(data)))
	b = binary.LittleEndian.AppendUint32(b, MaskedCRC(b[:8]))
	b = append(b, data...)
	b = binary.LittleEndian.AppendUint32(b, MaskedCRC(data))
	w.buf = b
	_, err := w.w.Write(b)
	return err
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is the CRC-32C of b, masked as the TFRecord framing stores
// it.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// Event is what Read decodes of one record: the fields this package
// writes.
type Event struct {
	Wall    time.Time
	Step    int64
	Version string   // the file's version, in its first event
	Scalars []Scalar // simple values, in the order written
}

// ErrCorrupt is Read's error for a record whose framing or checksum is
// wrong, or that ends before its length says.
var ErrCorrupt = errors.New("corrupt event record")

// Read reads a file's events, each record's checksums checked. Fields and
// values of other kinds (images, histograms, tensors) are skipped.
func Read(r io.Reader) ([]Event, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var evs []Event
	for len(b) > 0 {
		if len(b) < 12 || MaskedCRC(b[:8]) != binary.LittleEndian.Uint32(b[8:]) {
			return evs, fmt.Errorf("%w: record %d's header", ErrCorrupt, len(evs))
		}
		n := binary.LittleEndian.Uint64(b)
		b = b[12:]
		if uint64(len(b)) < n || uint64(len(b))-n < 4 || MaskedCRC(b[:n]) != binary.LittleEndian.Uint32(b[n:]) {
			return evs, fmt.Errorf("%w: record %d's data", ErrCorrupt, len(evs))
		}
		ev, err := decodeEvent(b[:n])
		if err != nil {
			return evs, fmt.Errorf("%w: record %d: %v", ErrCorrupt, len(evs), err)
		}
		evs = append(evs, ev)
		b = b[n+4:]
	}
	return evs, nil
}

func decodeEvent(b []byte) (Event, error) {
	var ev Event
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.Fixed64Type:
			sec := math.Float64frombits(x)
			whole := math.Floor(sec)
			ev.Wall = time.Unix(int64(whole), int64(math.Round((sec-whole)*1e9)))
		case num == 2 && typ == protowire.VarintType:
			ev.Step = int64(x)
		case num == 3 && typ == protowire.BytesType:
			ev.Version = string(v)
		case num == 5 && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				var s Scalar
				simple := false
				err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
					switch {
					case num == 1 && typ == protowire.BytesType:
						s.Tag = string(v)
					case num == 2 && typ == protowire.Fixed32Type:
						s.Value, simple = float64(math.Float32frombits(uint32(x))), true
					}
					return nil
				})
				if err == nil && simple {
					ev.Scalars = append(ev.Scalars, s)
				}
				return err
			})
		}
		return nil
	})
	return ev, err
}

// eachField calls f with each field of the message b: its number, type,
// and its bytes (length-delimited) or value (the others).
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var x32 uint32
			x32, n = protowire.ConsumeFixed32(b)
			x = uint64(x32)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
