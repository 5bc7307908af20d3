package storage

import (
	"strings"
	"testing"
)

func TestSegmentKeyOrder(t *testing.T) {
	r := &ObjectRun{run: "r"}
	for _, tc := range []struct {
		name         string
		a, b         [2]int64 // step, seq
		wantABeforeB bool
	}{
		{"step decides", [2]int64{9, 5}, [2]int64{10, 1}, true},
		{"seq within a step", [2]int64{7, 2}, [2]int64{7, 10}, true},
		{"later step, earlier seq", [2]int64{100, 3}, [2]int64{99, 4}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ka, kb := r.segmentKey(tc.a[0], tc.a[1]), r.segmentKey(tc.b[0], tc.b[1])
			if got := ka < kb; got != tc.wantABeforeB {
				t.Fatalf("%s < %s is %v", ka, kb, got)
			}
			if seq, ok := segmentSeq(ka); !ok || seq != tc.a[1] {
				t.Fatalf("segmentSeq(%s) = %d, %v", ka, seq, ok)
			}
		})
	}
}

// FuzzSegmentSeq: keys listed from a store are outside input.
func FuzzSegmentSeq(f *testing.F) {
	r := &ObjectRun{run: "r"}
	f.Add(r.segmentKey(12, 3))
	f.Add("r/progress/00000000000000000001-000000000002.jsonl")
	f.Add("r/progress/x.jsonl")
	f.Add("")
	f.Fuzz(func(t *testing.T, key string) {
		seq, ok := segmentSeq(key)
		if ok && !strings.HasSuffix(key, ".jsonl") {
			t.Fatalf("%q parsed as seq %d", key, seq)
		}
	})
}
