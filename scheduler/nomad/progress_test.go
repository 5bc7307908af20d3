package nomad

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	consul "github.com/hashicorp/consul/api"
	"github.com/shoenig/test/must"
)

const (
	line1 = `{"step":10,"time":"2026-12-02T10:00:10Z","metrics":{"epoch":1,"loss":0.5},"generation":1,"attempt":0}`
	line2 = `{"step":20,"time":"2026-12-02T10:00:20Z","metrics":{"epoch":2,"loss":0.25},"checkpoint":"checkpoint_000001","generation":1,"attempt":0}`
)

// A run in a directory this machine mounts is followed through storage:
// each Latest reads what was appended since the last.
func TestStoreProgressOnADirectory(t *testing.T) {
	root := t.TempDir()
	run := filepath.Join(root, "mnist")
	must.NoError(t, os.MkdirAll(run, 0o755))
	ctx := context.Background()

	for _, sp := range []string{root, "file://" + root} {
		p := &StoreProgress{StoragePath: sp, Run: "mnist"}
		_, err := p.Latest(ctx)
		must.ErrorIs(t, err, ErrNoProgress)
		must.NoError(t, p.Close())
	}
	p := &StoreProgress{StoragePath: root, Run: "mnist"}
	defer p.Close()
	progress := filepath.Join(run, "progress.jsonl")
	// A torn last line (rank 0 mid-append) is not a report yet.
	must.NoError(t, os.WriteFile(progress, []byte(line1+"\n"+`{"step":20,"ti`), 0o644))
	rec, err := p.Latest(ctx)
	must.NoError(t, err)
	must.Eq(t, int64(10), rec.Step)
	must.NoError(t, os.WriteFile(progress, []byte(line1+"\n"+line2+"\n"), 0o644))
	rec, err = p.Latest(ctx)
	must.NoError(t, err)
	must.Eq(t, int64(20), rec.Step)
	must.Eq(t, 0.25, rec.Metrics["loss"])
	rec, err = p.Latest(ctx)
	must.NoError(t, err)
	must.Eq(t, int64(20), rec.Step, must.Sprint("nothing new: the newest report still"))

	bad := &StoreProgress{StoragePath: root, Run: "bad"}
	defer bad.Close()
	must.NoError(t, os.MkdirAll(filepath.Join(root, "bad"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(root, "bad", "progress.jsonl"), []byte("not json\n"), 0o644))
	_, err = bad.Latest(ctx)
	must.ErrorContains(t, err, "line 1")
}

func TestMountedAt(t *testing.T) {
	root := t.TempDir()
	must.Eq(t, root, mountedAt(root))
	must.Eq(t, root, mountedAt("file://"+root))
	must.Eq(t, "", mountedAt(filepath.Join(root, "elsewhere")))
	must.Eq(t, "", mountedAt("s3://bucket/runs"))
	// A relative path is the workers' (in their task directories), even
	// when a directory of that name happens to exist where this runs.
	t.Chdir(root)
	must.Eq(t, "", mountedAt("."))
}

// fakeConsulKV serves GET /v1/kv/<key> as Consul does (a JSON list of one
// pair, Value base64), or 404 for other keys.
func fakeConsulKV(t *testing.T, key string, value []byte) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Consul-Index", "7")
		if r.URL.Path != "/v1/kv/"+key || value == nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode([]*consul.KVPair{{Key: key, Value: value, ModifyIndex: 7}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestConsulProgress(t *testing.T) {
	cases := []struct {
		name  string
		value []byte
		step  int64
		err   error
		msg   string
	}{
		{"published", []byte(line2), 20, nil, ""},
		{"published with a newline", []byte(line1 + "\n"), 10, nil, ""},
		{"not yet", nil, 0, ErrNoProgress, ""},
		{"empty", []byte(" "), 0, ErrNoProgress, ""},
		{"garbage", []byte(`{"step":`), 0, nil, "decoding published progress"},
		{"two records", []byte(line1 + "\n" + line2), 0, nil, "want one record, got 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := fakeConsulKV(t, ProgressKey("", "mnist", "mnist"), tc.value)
			c, err := consul.NewClient(&consul.Config{Address: addr})
			must.NoError(t, err)
			rec, err := ConsulProgress{KV: c.KV(), Job: "mnist", Run: "mnist"}.Latest(context.Background())
			switch {
			case tc.err != nil:
				must.ErrorIs(t, err, tc.err)
			case tc.msg != "":
				must.ErrorContains(t, err, tc.msg)
			default:
				must.NoError(t, err)
				must.Eq(t, tc.step, rec.Step)
			}
		})
	}
}

func TestProgressKey(t *testing.T) {
	must.Eq(t, "nomad-train/default/mnist/mnist/progress", ProgressKey("", "mnist", "mnist"))
	must.Eq(t, "nomad-train/ml/mnist/mnist/progress", ProgressKey("ml", "mnist", "mnist"))
	// Trials of two experiments share run names, not jobs.
	must.NotEq(t, ProgressKey("", "a-trial_0001", "trial_0001"), ProgressKey("", "b-trial_0001", "trial_0001"))
	must.Eq(t, "nomad-train/default/odd%2Fjob/r/progress", ProgressKey("default", "odd/job", "r"))
}

func FuzzDecodeProgress(f *testing.F) {
	f.Add([]byte(line1))
	f.Add([]byte(line2 + "\n"))
	f.Add([]byte(`{"step":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := DecodeProgress(b)
		if err != nil {
			return
		}
		// What decodes once re-encodes to something that decodes the same.
		out, err := json.Marshal(map[string]any{"step": rec.Step, "time": rec.Time, "metrics": rec.Metrics,
			"checkpoint": rec.Checkpoint, "generation": rec.Generation, "attempt": rec.Attempt})
		if err != nil {
			return // e.g. metrics holding values JSON cannot encode back
		}
		back, err := DecodeProgress(out)
		if err != nil {
			t.Fatalf("re-encoded record %s does not decode: %v", out, err)
		}
		if back.Step != rec.Step || !back.Time.Equal(rec.Time) {
			t.Fatalf("round trip changed the record: %+v != %+v", back, rec)
		}
	})
}

// treeKV records DeleteTree calls.
type treeKV struct{ deleted []string }

func (k *treeKV) DeleteTree(prefix string, _ *consul.WriteOptions) (*consul.WriteMeta, error) {
	k.deleted = append(k.deleted, prefix)
	return &consul.WriteMeta{}, nil
}

// A new submission of a job clears its last gang from Consul, but never
// under a job that still runs.
func TestClearRendezvous(t *testing.T) {
	ctx := context.Background()
	_, c := newTestClient(t)
	kv := &treeKV{}
	must.NoError(t, ClearRendezvous(ctx, c, kv, "", "never-ran"))
	must.Eq(t, []string{"nomad-train/default/never-ran/"}, kv.deleted)

	_, err := Submit(ctx, c, testJob("qs", 2), SubmitOptions{})
	must.NoError(t, err)
	kv.deleted = nil
	// Registered, nothing placed yet: "pending", as a real agent says.
	must.ErrorContains(t, ClearRendezvous(ctx, c, kv, "ml", "qs"), "the job is pending")
	must.SliceEmpty(t, kv.deleted)

	must.NoError(t, Stop(ctx, c, "qs", "ml", false))
	must.NoError(t, ClearRendezvous(ctx, c, kv, "ml", "qs"))
	must.Eq(t, []string{"nomad-train/ml/qs/"}, kv.deleted)
}
