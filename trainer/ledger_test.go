package trainer

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// The ledger writes records in step order and a checkpoint's record only
// once every contributing rank's upload is known; a failed upload drops
// it and every report behind it.
func TestLedger(t *testing.T) {
	ckpt := func(step int64, name string, ranks ...int) *entry {
		e := &entry{rec: storage.Record{Step: step}, ckpt: name, waiting: map[int]bool{}}
		for _, r := range ranks {
			e.waiting[r] = true
		}
		return e
	}
	plain := func(step int64) *entry { return &entry{rec: storage.Record{Step: step}} }
	ok := func(name string, file string) uploadResult {
		return uploadResult{Name: name, Files: []storage.FileSum{{Path: file}}}
	}
	type heard struct {
		rank int
		res  uploadResult
	}
	for _, tc := range []struct {
		name    string
		entries []*entry
		heard   []heard
		ready   []int64 // steps
		dropped []dropped
		err     string
		left    bool
	}{
		{"plain records go at once", []*entry{plain(1), plain(2)}, nil, []int64{1, 2}, nil, "", false},
		{"a record waits behind an upload", []*entry{plain(1), ckpt(2, "c2", 0, 1), plain(3)},
			[]heard{{0, ok("c2", "a")}}, []int64{1}, nil, "", true},
		{"every rank heard: in order", []*entry{ckpt(2, "c2", 0, 1), plain(3)},
			[]heard{{1, ok("c2", "b")}, {0, ok("c2", "a")}}, []int64{2, 3}, nil, "", false},
		{"a failure drops the rest", []*entry{plain(1), ckpt(2, "c2", 0, 1), plain(3), ckpt(4, "c4", 0)},
			[]heard{{1, uploadResult{Name: "c2", Err: "disk on fire"}}, {0, ok("c2", "a")}},
			[]int64{1}, []dropped{{"c2", ""}, {"c4", ""}}, "uploading checkpoint c2 failed on rank 1: disk on fire", false},
		{"rank 0's own files are dropped with its checkpoint", []*entry{ckpt(2, "c2", 0, 1)},
			[]heard{{0, uploadResult{Name: "c2", Own: &storage.InlineFiles{Dir: "scratch/rank0-1"}}},
				{1, uploadResult{Name: "c2", Err: "disk on fire"}}},
			nil, []dropped{{"c2", "scratch/rank0-1"}}, "uploading checkpoint c2 failed on rank 1: disk on fire", false},
		{"a result for a dropped checkpoint is ignored", []*entry{plain(1)},
			[]heard{{0, ok("c9", "a")}}, []int64{1}, nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l ledger
			for _, e := range tc.entries {
				l.add(e)
			}
			for _, h := range tc.heard {
				l.heard(h.rank, h.res)
			}
			out, dropped, err := l.ready()
			var steps []int64
			for _, e := range out {
				steps = append(steps, e.rec.Step)
			}
			must.Eq(t, tc.ready, steps)
			must.Eq(t, tc.dropped, dropped)
			if tc.err == "" {
				must.NoError(t, err)
			} else {
				must.EqError(t, err, tc.err)
			}
			must.EqOp(t, tc.left, l.pending())
		})
	}
}

// A checkpoint's manifest lists every rank's files.
func TestLedgerGathersFiles(t *testing.T) {
	var l ledger
	l.add(&entry{ckpt: "c", waiting: map[int]bool{0: true, 3: true}})
	l.heard(3, uploadResult{Name: "c", Files: []storage.FileSum{{Path: "b"}}})
	l.heard(0, uploadResult{Name: "c", Files: []storage.FileSum{{Path: "a"}}})
	out, _, err := l.ready()
	must.NoError(t, err)
	must.SliceLen(t, 1, out)
	must.Eq(t, []storage.FileSum{{Path: "b"}, {Path: "a"}}, out[0].files)
}
