package storage

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

const (
	sumA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	sumB = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
)

func sampleManifest() Manifest {
	return Manifest{
		Record: Record{Step: 12, Time: time.Date(2026, 12, 2, 15, 4, 5, 0, time.UTC), Metrics: map[string]any{"loss": 0.25}, Generation: 2, Attempt: 1,
			TimeTotal: 3 * time.Second},
		Files: []FileSum{{Path: "optim/state.bin", Size: 3, SHA256: sumB}, {Path: "model.bin", Size: 4, SHA256: sumA}},
	}
}

func TestManifestRoundTrip(t *testing.T) {
	b, err := EncodeManifest(sampleManifest())
	must.NoError(t, err)
	m, err := DecodeManifest(b)
	must.NoError(t, err)
	must.Eq(t, []FileSum{{Path: "model.bin", Size: 4, SHA256: sumA}, {Path: "optim/state.bin", Size: 3, SHA256: sumB}}, m.Files,
		must.Sprint("files come back sorted"))
	must.Eq(t, int64(12), m.Record.Step)
	must.True(t, m.Record.Time.Equal(sampleManifest().Record.Time))
	must.Eq(t, map[string]any{"loss": 0.25}, m.Record.Metrics)
	must.Eq(t, uint64(2), m.Record.Generation)
	must.Eq(t, 1, m.Record.Attempt)
	must.Eq(t, 3*time.Second, m.Record.TimeTotal)
	must.StrContains(t, string(b), `"format_version": 1`)
}

func TestDecodeManifestRefuses(t *testing.T) {
	file := func(p string, size int64, sum string) string {
		return `{"path":"` + p + `","size":` + strconv.FormatInt(size, 10) + `,"sha256":"` + sum + `"}`
	}
	doc := func(version, files string) string {
		return `{"format_version":` + version + `,"step":1,"time":"2026-12-02T15:00:00Z","files":[` + files + `]}`
	}
	cases := []struct{ name, in, want string }{
		{"not json", "{", "decoding manifest"},
		{"no version", `{"step":1,"time":"2026-12-02T15:00:00Z","files":[]}`, "format_version"},
		{"future version", doc("2", ""), "not supported"},
		{"no step", `{"format_version":1,"time":"2026-12-02T15:00:00Z"}`, `"step"`},
		{"no time", `{"format_version":1,"step":1}`, `"time"`},
		{"absolute path", doc("1", file("/etc/passwd", 1, sumA)), "leaves the checkpoint"},
		{"dot dot", doc("1", file("../x", 1, sumA)), "leaves the checkpoint"},
		{"unclean", doc("1", file("a//b", 1, sumA)), "not clean"},
		{"empty path", doc("1", file("", 1, sumA)), "not clean"},
		{"lists itself", doc("1", file(ManifestFile, 1, sumA)), "lists itself"},
		{"repeated", doc("1", file("a", 1, sumA)+","+file("a", 1, sumA)), "not sorted or repeated"},
		{"unsorted", doc("1", file("b", 1, sumA)+","+file("a", 1, sumA)), "not sorted or repeated"},
		{"negative size", doc("1", file("a", -1, sumA)), "size -1"},
		{"short sum", doc("1", file("a", 1, "abc")), "64 lowercase hex"},
		{"upper sum", doc("1", file("a", 1, strings.ToUpper(sumA))), "64 lowercase hex"},
		{"trailing data", doc("1", "") + "{}", "data after"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeManifest([]byte(tc.in))
			must.ErrorContains(t, err, tc.want)
		})
	}
}

func TestManifestCheck(t *testing.T) {
	m := sampleManifest()
	cases := []struct {
		name  string
		found []FileSum
		want  []string
	}{
		{"match", []FileSum{{"model.bin", 4, sumA, false}, {"optim/state.bin", 3, sumB, false}}, nil},
		{"sizes only", []FileSum{{"model.bin", 4, "", false}, {"optim/state.bin", 3, "", false}}, nil},
		{"truncated", []FileSum{{"model.bin", 2, "", false}, {"optim/state.bin", 3, "", false}}, []string{"model.bin is 2 bytes, the manifest says 4"}},
		{"flipped", []FileSum{{"model.bin", 4, sumB, false}, {"optim/state.bin", 3, sumB, false}}, []string{"model.bin has sha256 " + sumB + ", the manifest says " + sumA}},
		{"missing", []FileSum{{"model.bin", 4, sumA, false}}, []string{"optim/state.bin is missing"}},
		{"extra", []FileSum{{"model.bin", 4, sumA, false}, {"optim/state.bin", 3, sumB, false}, {"x", 1, sumA, false}}, []string{"x is not in the manifest"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, m.Check(tc.found))
		})
	}
}

// FuzzDecodeManifest checks that the decoder never panics, that whatever it
// accepts is well formed (clean relative paths, sorted, hex sums) and
// survives a round trip through the encoder.
func FuzzDecodeManifest(f *testing.F) {
	good, err := EncodeManifest(sampleManifest())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"format_version":1,"step":0,"time":"2026-12-02T15:00:00Z","files":[]}`))
	f.Add([]byte(`{"format_version":1,"step":1,"time":"2026-12-02T15:00:00Z","files":[{"path":"../x","size":1,"sha256":"` + sumA + `"}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeManifest(data)
		if err != nil {
			return
		}
		for i, file := range m.Files {
			if checkManifestPath(file.Path) != nil || strings.HasPrefix(file.Path, "/") || strings.Contains("/"+file.Path+"/", "/../") {
				t.Fatalf("accepted a path that leaves the checkpoint: %q", file.Path)
			}
			if i > 0 && m.Files[i-1].Path >= file.Path {
				t.Fatalf("accepted unsorted files")
			}
		}
		b, err := EncodeManifest(m)
		if err != nil {
			t.Fatalf("accepted manifest does not encode: %v", err)
		}
		again, err := DecodeManifest(b)
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v", err)
		}
		b2, err := EncodeManifest(again)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("round trip is not stable: %v\n%s\n%s", err, b, b2)
		}
	})
}
