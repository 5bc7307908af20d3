package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

const (
	line1 = `{"step":1,"time":"2026-12-02T15:00:00Z","metrics":{"loss":0.5},"generation":0,"attempt":0}` + "\n"
	line2 = `{"step":2,"time":"2026-12-02T15:00:01.5Z","metrics":{"loss":0.25,"tags":["a"]},"checkpoint":"checkpoint_000000","generation":1,"attempt":0}` + "\n"
	line3 = `{"step":3,"time":"2026-12-02T15:00:02Z","metrics":{},"generation":1,"attempt":1}` + "\n"
)

func TestRecordRoundTrip(t *testing.T) {
	in := []Record{
		{Step: -1, Time: time.Unix(0, 1).UTC(), Checkpoint: "checkpoint_1234567"},
		{Step: 0, Time: time.Date(2026, 12, 2, 15, 0, 0, 123456789, time.UTC), Metrics: map[string]any{"loss": 0.5, "name": "a\nb", "nested": map[string]any{"x": []any{1.0, "y"}}}},
		{Step: 7, Time: time.Date(2026, 12, 2, 16, 0, 0, 0, time.FixedZone("x", 3600)), Checkpoint: "checkpoint_000012", Generation: 3, Attempt: 2,
			TimeTotal: 90*time.Second + 250*time.Millisecond},
	}
	var buf bytes.Buffer
	for _, rec := range in {
		line, err := encodeRecord(rec)
		must.NoError(t, err)
		must.Eq(t, 1, bytes.Count(line, []byte("\n")), must.Sprint("a record is exactly one line"))
		buf.Write(line)
	}
	out, err := ReadProgress(&buf)
	must.NoError(t, err)
	must.Len(t, len(in), out)
	for i := range in {
		must.Eq(t, in[i].Step, out[i].Step)
		must.True(t, in[i].Time.Equal(out[i].Time))
		must.Eq(t, in[i].Checkpoint, out[i].Checkpoint)
		must.Eq(t, in[i].Generation, out[i].Generation)
		must.Eq(t, in[i].Attempt, out[i].Attempt)
		must.Eq(t, in[i].TimeTotal, out[i].TimeTotal)
	}
	line, err := encodeRecord(in[2])
	must.NoError(t, err)
	must.StrContains(t, string(line), `"time_total_s":90.25`)
	line, err = encodeRecord(in[1])
	must.NoError(t, err)
	must.StrNotContains(t, string(line), "time_total_s", must.Sprint("a record without it is written as before"))
	for _, bad := range []string{"-1", "1e300"} { // read as none
		out, err := ReadProgress(strings.NewReader(`{"step":1,"time":"2026-12-02T15:00:00Z","metrics":{},"time_total_s":` + bad + "}\n"))
		must.NoError(t, err)
		must.Eq(t, 0, out[0].TimeTotal)
	}
	must.Eq(t, map[string]any{"loss": 0.5, "name": "a\nb", "nested": map[string]any{"x": []any{1.0, "y"}}}, out[1].Metrics)
	must.Eq(t, map[string]any{}, out[2].Metrics)
}

func TestEncodeRecordRejectsNaN(t *testing.T) {
	_, err := encodeRecord(Record{Metrics: map[string]any{"loss": math.NaN()}})
	must.ErrorIs(t, err, ErrInvalidRecord)
}

func TestReadProgress(t *testing.T) {
	cases := []struct {
		name     string
		in       string
		steps    []int64
		corrupt  int // line number of the expected *CorruptError, 0 for none
		errMatch string
	}{
		{name: "empty", in: ""},
		{name: "three", in: line1 + line2 + line3, steps: []int64{1, 2, 3}},
		{name: "torn last line", in: line1 + line2 + line3[:20], steps: []int64{1, 2}},
		{name: "torn almost complete", in: line1 + strings.TrimSuffix(line2, "\n"), steps: []int64{1}},
		{name: "torn zeros after crash", in: line1 + "\x00\x00\x00\x00", steps: []int64{1}},
		{name: "only torn", in: `{"step":1,"ti`},
		{name: "corrupt middle", in: line1 + "{not json}\n" + line3, corrupt: 2},
		{name: "zeros in middle", in: line1 + "\x00\x00\n" + line3, corrupt: 2},
		{name: "empty line", in: line1 + "\n" + line3, corrupt: 2},
		{name: "corrupt complete last line", in: line1 + line2 + `{"step":3}` + "\n", corrupt: 3, errMatch: `missing "time"`},
		{name: "missing step", in: `{"time":"2026-12-02T15:00:00Z"}` + "\n", corrupt: 1, errMatch: `missing "step"`},
		{name: "bad time", in: `{"step":1,"time":"yesterday"}` + "\n", corrupt: 1},
		{name: "not an object", in: line1 + "[1,2]\n", corrupt: 2},
		{name: "trailing data", in: line1 + `{"step":1,"time":"2026-12-02T15:00:00Z"} x` + "\n", corrupt: 2},
		{name: "path in checkpoint", in: `{"step":1,"time":"2026-12-02T15:00:00Z","checkpoint":"../../etc"}` + "\n", corrupt: 1, errMatch: "invalid checkpoint name"},
		{name: "short checkpoint index", in: `{"step":1,"time":"2026-12-02T15:00:00Z","checkpoint":"checkpoint_1"}` + "\n", corrupt: 1},
		{name: "duplicate checkpoint", in: line1 + line2 + line2, corrupt: 3, errMatch: "already recorded on line 2"},
		{name: "step goes back", in: line2 + line3 + line1, corrupt: 3, errMatch: "step 1 comes after step 3"},
		{name: "same step twice", in: line1 + line1, steps: []int64{1, 1}},
		{name: "line too long", in: line1 + `{"step":2,"time":"2026-12-02T15:00:00Z","metrics":{"x":"` + strings.Repeat("a", maxRecordLine) + `"}}` + "\n", corrupt: 2, errMatch: "longer than"},
		{name: "long torn line", in: line1 + strings.Repeat("a", maxRecordLine+10), steps: []int64{1}},
		{name: "unknown fields are kept compatible", in: `{"step":5,"time":"2026-12-02T15:00:00Z","future":true}` + "\n", steps: []int64{5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := ReadProgress(strings.NewReader(tc.in))
			if tc.corrupt != 0 {
				var ce *CorruptError
				must.True(t, errors.As(err, &ce), must.Sprintf("want *CorruptError, got %v", err))
				must.Eq(t, tc.corrupt, ce.Line)
				must.StrContains(t, err.Error(), fmt.Sprintf("line %d", tc.corrupt))
				if tc.errMatch != "" {
					must.StrContains(t, err.Error(), tc.errMatch)
				}
				return
			}
			must.NoError(t, err)
			var steps []int64
			for _, r := range recs {
				steps = append(steps, r.Step)
			}
			must.Eq(t, tc.steps, steps)
		})
	}
}

// FuzzReadProgress checks that the decoder never panics, that whatever it
// accepts survives a round trip through the encoder, and that a torn tail
// never changes what the complete lines decode to.
func FuzzReadProgress(f *testing.F) {
	f.Add([]byte(line1 + line2 + line3))
	f.Add([]byte(line1 + line2[:30]))
	f.Add([]byte("{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := ReadProgress(bytes.NewReader(data))
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Line < 1 {
				t.Fatalf("error is not a *CorruptError with a line: %v", err)
			}
			return
		}
		var buf bytes.Buffer
		for _, rec := range recs {
			line, err := encodeRecord(rec)
			if err != nil {
				t.Fatalf("accepted record does not encode: %v", err)
			}
			buf.Write(line)
		}
		again, err := ReadProgress(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("re-encoded records do not decode: %v", err)
		}
		if len(again) != len(recs) {
			t.Fatalf("round trip changed the record count: %d -> %d", len(recs), len(again))
		}
		for i := range recs {
			a, b := recs[i], again[i]
			if a.Step != b.Step || !a.Time.Equal(b.Time) || a.Checkpoint != b.Checkpoint || a.Generation != b.Generation || a.Attempt != b.Attempt {
				t.Fatalf("round trip changed record %d: %+v -> %+v", i, a, b)
			}
		}
		torn, err := ReadProgress(bytes.NewReader(append(buf.Bytes(), `{"step":9`...)))
		if err != nil || len(torn) != len(recs) {
			t.Fatalf("a torn tail changed the result: %d records, %v", len(torn), err)
		}
	})
}
