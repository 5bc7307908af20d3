package data_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/data"
)

// countingSource has records "record i" and counts which ones were read.
type countingSource struct {
	n    int
	read map[int]int
}

func (c *countingSource) Len() int { return c.n }

func (c *countingSource) Record(i int, dst []byte) ([]byte, error) {
	if c.read != nil {
		c.read[i]++
	}
	return fmt.Appendf(dst, "record %d", i), nil
}

// Every epoch's shards are disjoint, equally long and cover all but the
// last Len mod WorldSize records, for every world size, so a run restarted
// with another world size again sees each record at most once per epoch.
func TestStreamSplitShardsPartitionForAnyWorldSize(t *testing.T) {
	for _, n := range []int{0, 1, 7, 1000, 1027} {
		for _, shuffle := range []bool{false, true} {
			for world := 1; world <= 5; world++ {
				t.Run(fmt.Sprintf("n=%d/shuffle=%v/world=%d", n, shuffle, world), func(t *testing.T) {
					src := &countingSource{n: n}
					for epoch := 0; epoch < 3; epoch++ {
						seen := map[int]bool{}
						for rank := 0; rank < world; rank++ {
							s := data.StreamSplit{Source: src, Rank: rank, WorldSize: world, Shuffle: shuffle, Seed: 9, BlockSize: 64, ShuffleBuffer: 100}
							idx := s.Indices(epoch)
							must.Eq(t, n/world, len(idx))
							for _, i := range idx {
								must.False(t, seen[i], must.Sprintf("record %d twice in epoch %d", i, epoch))
								seen[i] = true
							}
						}
						must.Eq(t, n/world*world, len(seen))
					}
				})
			}
		}
	}
}

// The split is a function of the epoch: the same across calls, different
// from epoch to epoch when shuffling, identity order without.
func TestStreamSplitOrder(t *testing.T) {
	src := &countingSource{n: 1000}
	s := data.StreamSplit{Source: src, Rank: 1, WorldSize: 2, Shuffle: true, Seed: 3}
	must.Eq(t, s.Indices(4), s.Indices(4))
	must.NotEq(t, s.Indices(4), s.Indices(5))
	plain := data.StreamSplit{Source: src, Rank: 1, WorldSize: 2}
	idx := plain.Indices(0)
	must.Eq(t, 500, idx[0])
	must.True(t, sort.IntsAreSorted(idx))
	must.Eq(t, []data.Run{{500, 1000}}, plain.Runs(0))
}

// A rank reads only its own records, each once, and receives them in the
// order Indices promises with the bytes the source holds.
func TestStreamReadsOnlyOwnShard(t *testing.T) {
	ctx := context.Background()
	src := &countingSource{n: 1000, read: map[int]int{}}
	s := data.StreamSplit{Source: src, Rank: 2, WorldSize: 4, Shuffle: true, Seed: 1, BlockSize: 32}
	st, err := s.Epoch(ctx, 7, 30)
	must.NoError(t, err)
	var got []int
	for b, ok := st.Next(); ok; b, ok = st.Next() {
		for k, i := range b.Indices {
			must.Eq(t, fmt.Sprintf("record %d", i), string(b.Records[k]))
		}
		got = append(got, b.Indices...)
	}
	must.NoError(t, st.Err())
	st.Close()
	must.Eq(t, s.Indices(7), got)
	must.MapLen(t, 250, src.read)
	for i, c := range src.read {
		must.Eq(t, 1, c, must.Sprintf("record %d", i))
	}
}

// Closing a stream in the middle stops its reader.
func TestStreamCloseEarly(t *testing.T) {
	s := data.StreamSplit{Source: &countingSource{n: 10000}, WorldSize: 1, ReadAhead: 1}
	st, err := s.Epoch(context.Background(), 0, 10)
	must.NoError(t, err)
	_, ok := st.Next()
	must.True(t, ok)
	st.Close()
	must.ErrorIs(t, st.Err(), context.Canceled)
	_, err = s.Epoch(context.Background(), 0, 0)
	must.ErrorIs(t, err, data.ErrStreamConfig)
}

// writeIDX writes an IDX file of uint8 records of shape dims.
func writeIDX(t *testing.T, path string, typ byte, dims []int, body []byte) {
	t.Helper()
	var b bytes.Buffer
	b.Write([]byte{0, 0, typ, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, uint32(d))
	}
	b.Write(body)
	must.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
}

// An IDX file is read record by record after a gzip unpack, and zipped
// with a label file; a truncated one is refused.
func TestIDXAndZip(t *testing.T) {
	dir := t.TempDir()
	imgs := make([]byte, 5*2*3)
	for i := range imgs {
		imgs[i] = byte(i)
	}
	writeIDX(t, filepath.Join(dir, "img.idx"), data.IDXUint8, []int{5, 2, 3}, imgs)
	raw, err := os.ReadFile(filepath.Join(dir, "img.idx"))
	must.NoError(t, err)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	must.NoError(t, os.WriteFile(filepath.Join(dir, "img.idx.gz"), gz.Bytes(), 0o644))
	writeIDX(t, filepath.Join(dir, "lab.idx"), data.IDXUint8, []int{5}, []byte{9, 8, 7, 6, 5})

	_, err = data.OpenIDX(filepath.Join(dir, "img.idx.gz"))
	must.ErrorIs(t, err, data.ErrIDX)
	unpacked, err := data.UnpackGzip(filepath.Join(dir, "img.idx.gz"), filepath.Join(dir, "cache"))
	must.NoError(t, err)
	img, err := data.OpenIDX(unpacked)
	must.NoError(t, err)
	defer img.Close()
	lab, err := data.OpenIDX(filepath.Join(dir, "lab.idx"))
	must.NoError(t, err)
	defer lab.Close()
	must.Eq(t, []int{5, 2, 3}, img.Dims)
	must.Eq(t, 6, img.RecordSize())
	z := data.Zip{img, lab}
	rec, err := z.Record(3, nil)
	must.NoError(t, err)
	must.Eq(t, []byte{18, 19, 20, 21, 22, 23, 6}, rec)
	_, err = z.Record(5, nil)
	must.Error(t, err)

	writeIDX(t, filepath.Join(dir, "short.idx"), data.IDXUint8, []int{5, 2}, []byte{1, 2, 3})
	_, err = data.OpenIDX(filepath.Join(dir, "short.idx"))
	must.ErrorIs(t, err, data.ErrIDX)
}

// Shards read as one source across files; CSV and JSON-lines files are
// indexed by line, skipping the header and blank lines, CRLF or not.
func TestShardsAndLines(t *testing.T) {
	dir := t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(dir, "a.bin"), []byte("aabbcc"), 0o644))
	must.NoError(t, os.WriteFile(filepath.Join(dir, "b.bin"), []byte("ddee"), 0o644))
	sh, err := data.OpenShards(2, filepath.Join(dir, "a.bin"), filepath.Join(dir, "b.bin"))
	must.NoError(t, err)
	defer sh.Close()
	must.Eq(t, 5, sh.Len())
	for i, want := range []string{"aa", "bb", "cc", "dd", "ee"} {
		got, err := sh.Record(i, nil)
		must.NoError(t, err)
		must.Eq(t, want, string(got))
	}
	_, err = data.OpenShards(4, filepath.Join(dir, "a.bin"))
	must.Error(t, err)

	must.NoError(t, os.WriteFile(filepath.Join(dir, "d.csv"), []byte("x,y\r\n1,2\r\n\r\n3.5, 4\n5,6"), 0o644))
	csv, err := data.OpenLines(filepath.Join(dir, "d.csv"), 1)
	must.NoError(t, err)
	defer csv.Close()
	must.Eq(t, 3, csv.Len())
	rec, err := csv.Record(1, nil)
	must.NoError(t, err)
	v, err := data.ParseCSVFloats(rec, nil)
	must.NoError(t, err)
	must.Eq(t, []float32{3.5, 4}, v)
	rec, err = csv.Record(2, nil)
	must.NoError(t, err)
	must.Eq(t, "5,6", string(rec))

	must.NoError(t, os.WriteFile(filepath.Join(dir, "d.jsonl"), []byte(`{"x":[1,2],"label":3}`+"\n"+`{"x":[4],"label":1}`+"\n"), 0o644))
	jl, err := data.OpenLines(filepath.Join(dir, "d.jsonl"), 0)
	must.NoError(t, err)
	defer jl.Close()
	rec, err = jl.Record(1, nil)
	must.NoError(t, err)
	var row struct {
		X     []float32 `json:"x"`
		Label int       `json:"label"`
	}
	must.NoError(t, data.ParseJSONLine(rec, &row))
	must.Eq(t, 1, row.Label)
	must.Error(t, data.ParseJSONLine([]byte("{"), &row))
}

// FuzzReadIDXHeader: a header either decodes to a shape whose sizes are
// sane or is refused; it never panics.
func FuzzReadIDXHeader(f *testing.F) {
	f.Add([]byte{0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28})
	f.Add([]byte{0, 0, 8, 1, 0, 0, 0, 10})
	f.Add([]byte{0, 0, 0x0d, 2, 255, 255, 255, 255, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := data.ReadIDXHeader(bytes.NewReader(b))
		if err != nil {
			return
		}
		if h.Len() < 0 || h.RecordSize() < 0 || len(h.Dims) == 0 {
			t.Fatalf("bad shape %+v", h)
		}
	})
}
