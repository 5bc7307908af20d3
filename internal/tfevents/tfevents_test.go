package tfevents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// TestMaskedCRC checks the mask against CRC-32C's check value (the CRC
// of "123456789" is 0xe3069283), masked by hand.
func TestMaskedCRC(t *testing.T) {
	must.Eq(t, uint32(0xc78ab0e5), MaskedCRC([]byte("123456789")))
}

func TestFileName(t *testing.T) {
	must.Eq(t, "events.out.tfevents.1700000000.nomad-train",
		FileName(time.Unix(1700000000, 5e8), "nomad-train"))
}

// writeSample writes a version event and two scalar events.
func writeSample(t testing.TB, w io.Writer) {
	t.Helper()
	ew := NewWriter(w)
	must.NoError(t, ew.WriteVersion(time.Unix(1700000000, 250e6)))
	must.NoError(t, ew.WriteScalars(time.Unix(1700000001, 0), 0, []Scalar{{"loss", 2.5}, {"acc", 0.125}}))
	must.NoError(t, ew.WriteScalars(time.Unix(1700000002, 0), 7, []Scalar{{"loss", 0.5}, {"eval/acc", 1e40}}))
}

var sampleWant = []Event{
	{Wall: time.Unix(1700000000, 250e6), Version: FileVersion},
	{Wall: time.Unix(1700000001, 0), Step: 0, Scalars: []Scalar{{"loss", 2.5}, {"acc", 0.125}}},
	{Wall: time.Unix(1700000002, 0), Step: 7, Scalars: []Scalar{{"loss", 0.5}, {"eval/acc", math.Inf(1)}}},
}

func TestWriterRoundTrip(t *testing.T) {
	var b bytes.Buffer
	writeSample(t, &b)
	got, err := Read(bytes.NewReader(b.Bytes()))
	must.NoError(t, err)
	must.Eq(t, sampleWant, got)

	// The same events give the same bytes (an export rewritten in place).
	var again bytes.Buffer
	writeSample(t, &again)
	must.Eq(t, b.Bytes(), again.Bytes())
}

// failingWriter fails every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriterError(t *testing.T) {
	err := NewWriter(failingWriter{}).WriteScalars(time.Now(), 1, []Scalar{{"loss", 1}})
	must.ErrorContains(t, err, "disk full")
}

// TestReadByProtobuf reads the sample back with Google's protobuf library
// (Debian's python3-protobuf), from the messages' descriptors, with a
// CRC-32C of its own: a reader that shares no code with the writer.
func TestReadByProtobuf(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import google.protobuf").Run(); err != nil {
		t.Skipf("needs %s with google.protobuf (Debian's python3-protobuf): %v", py, err)
	}
	path := filepath.Join(t.TempDir(), FileName(time.Unix(1700000000, 0), "test"))
	f, err := os.Create(path)
	must.NoError(t, err)
	writeSample(t, f)
	must.NoError(t, f.Close())
	out, err := exec.Command(py, "-c", protobufReader, path).CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	var read []struct {
		Wall    float64 `json:"wall_time"`
		Step    int64   `json:"step"`
		Version string  `json:"file_version"`
		Values  [][2]any
	}
	must.NoError(t, json.Unmarshal(out, &read), must.Sprint(string(out)))
	var got []Event
	for _, r := range read {
		ev := Event{Wall: time.Unix(0, int64(r.Wall*1e3)*1e6), Step: r.Step, Version: r.Version}
		for _, v := range r.Values {
			x := v[1].(float64)
			if x == 1e308 { // JSON has no infinity; the reader writes this
				x = math.Inf(1)
			}
			ev.Scalars = append(ev.Scalars, Scalar{v[0].(string), x})
		}
		got = append(got, ev)
	}
	must.Eq(t, sampleWant, got, must.Sprint(fmt.Sprintf("python read %s", out)))
}

// protobufReader reads an event file given as its argument and prints
// its events as JSON.
const protobufReader = `
import json, struct, sys, math
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

def crc32c(b):
    c = 0xffffffff
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xffffffff

def masked(b):
    c = crc32c(b)
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff

F = descriptor_pb2.FieldDescriptorProto
fd = descriptor_pb2.FileDescriptorProto(name="event.proto", package="tensorflow", syntax="proto3")
def message(name, fields):
    m = fd.message_type.add(name=name)
    for fname, num, typ, label, tname in fields:
        f = m.field.add(name=fname, number=num, type=typ, label=label)
        if tname:
            f.type_name = tname
O, R = F.LABEL_OPTIONAL, F.LABEL_REPEATED
message("Value", [("tag", 1, F.TYPE_STRING, O, None), ("simple_value", 2, F.TYPE_FLOAT, O, None)])
message("Summary", [("value", 1, F.TYPE_MESSAGE, R, ".tensorflow.Value")])
message("Event", [("wall_time", 1, F.TYPE_DOUBLE, O, None), ("step", 2, F.TYPE_INT64, O, None),
                  ("file_version", 3, F.TYPE_STRING, O, None), ("summary", 5, F.TYPE_MESSAGE, O, ".tensorflow.Summary")])
pool = descriptor_pool.DescriptorPool()
pool.Add(fd)
desc = pool.FindMessageTypeByName("tensorflow.Event")
if hasattr(message_factory, "GetMessageClass"):
    Event = message_factory.GetMessageClass(desc)
else:  # before protobuf 4.22 (Debian 12 has 4.21)
    Event = message_factory.MessageFactory(pool).GetPrototype(desc)

data = open(sys.argv[1], "rb").read()
out = []
while data:
    header = data[:8]
    (n,) = struct.unpack("<Q", header)
    assert struct.unpack("<I", data[8:12])[0] == masked(header), "length crc"
    body = data[12:12 + n]
    assert struct.unpack("<I", data[12 + n:16 + n])[0] == masked(body), "data crc"
    data = data[16 + n:]
    ev = Event()
    ev.ParseFromString(body)
    vals = [[v.tag, 1e308 if math.isinf(v.simple_value) else v.simple_value] for v in ev.summary.value]
    out.append({"wall_time": ev.wall_time, "step": ev.step, "file_version": ev.file_version, "values": vals})
print(json.dumps(out))
`

// Read refuses a record whose checksum, length or message is wrong, and
// returns the events before it.
func TestReadCorrupt(t *testing.T) {
	var b bytes.Buffer
	ew := NewWriter(&b)
	must.NoError(t, ew.WriteVersion(time.Unix(1700000000, 0)))
	must.NoError(t, ew.WriteScalars(time.Unix(1700000001, 0), 1, []Scalar{{"loss", 1}}))
	last := b.Len() // where the third record starts
	must.NoError(t, ew.WriteScalars(time.Unix(1700000002, 0), 2, []Scalar{{"loss", 0.5}}))
	good := b.Bytes()
	for name, mutate := range map[string]func([]byte) []byte{
		"length":    func(b []byte) []byte { b[last] ^= 1; return b },
		"data":      func(b []byte) []byte { b[last+12] ^= 1; return b },
		"checksum":  func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
		"truncated": func(b []byte) []byte { return b[:len(b)-3] },
		"short":     func(b []byte) []byte { return b[:last+5] },
	} {
		t.Run(name, func(t *testing.T) {
			evs, err := Read(bytes.NewReader(mutate(bytes.Clone(good))))
			must.ErrorIs(t, err, ErrCorrupt)
			must.Len(t, 2, evs)
		})
	}
	evs, err := Read(bytes.NewReader(good))
	must.NoError(t, err)
	must.Len(t, 3, evs)
}

// FuzzRead: no input makes Read panic, and every failure is ErrCorrupt.
func FuzzRead(f *testing.F) {
	var b bytes.Buffer
	writeSample(f, &b)
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := Read(bytes.NewReader(data)); err != nil {
			must.ErrorIs(t, err, ErrCorrupt)
		}
	})
}
