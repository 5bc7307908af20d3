package storage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

func TestPlanInline(t *testing.T) {
	f := func(path string, size int64) FileSum { return FileSum{Path: path, Size: size} }
	paths := func(files []FileSum) []string {
		var out []string
		for _, f := range files {
			out = append(out, f.Path)
		}
		return out
	}
	for _, tc := range []struct {
		name           string
		files          []FileSum
		inline, upload []string
	}{
		{"nothing", nil, nil, nil},
		{"a small checkpoint goes whole", []FileSum{f("a", 1<<20), f("b", 3<<20)}, []string{"a", "b"}, nil},
		{"up to the limit", []FileSum{f("a", inlineWhole)}, []string{"a"}, nil},
		{"one byte over: small files only", []FileSum{f("a", inlineWhole+1), f("meta", 100)}, []string{"meta"}, []string{"a"}},
		{"small files up to their total", []FileSum{
			f("big", 1<<30), f("s1", inlineSmall), f("s2", inlineSmall), f("t", inlineSmall+1),
		}, []string{"s1", "s2"}, []string{"big", "t"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inline, upload := planInline(tc.files)
			must.Eq(t, tc.inline, paths(inline))
			must.Eq(t, tc.upload, paths(upload))
		})
	}
	var many []FileSum
	for i := range 2 * inlineSmallTotal / inlineSmall {
		many = append(many, f(strings.Repeat("x", i+1), inlineSmall))
	}
	many = append(many, f("big", inlineWhole))
	inline, _ := planInline(many)
	var total int64
	for _, f := range inline {
		total += f.Size
	}
	must.EqOp(t, int64(inlineSmallTotal), total)
}

// A small checkpoint is one object, its manifest; a bigger one uploads
// its big files and carries its small ones. Both restore whole.
func TestInlineCheckpointObjects(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.Bucket, Prefix: "inline"}, objstore.Config{})
	must.NoError(t, err)
	w, err := OpenObject(ctx, st, "run", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	defer w.Close()
	big := strings.Repeat("b", inlineWhole+1)
	for _, tc := range []struct {
		name    string
		files   map[string]string
		objects []string
	}{
		{"small", map[string]string{"model.bin": "weights", "opt/state": "moments"}, []string{ManifestFile}},
		{"mixed", map[string]string{"model.bin": big, "rng.json": "{}"}, []string{ManifestFile, "model.bin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := w.Stage()
			must.NoError(t, err)
			writeTree(t, s.Dir(), tc.files)
			name, err := w.Commit(s, Record{Step: 1})
			must.NoError(t, err)
			must.NoError(t, w.flushed())
			objs, err := st.List(ctx, objstore.ListOptions{Prefix: "run/checkpoints/" + name + "/"})
			must.NoError(t, err)
			var keys []string
			for _, o := range objs {
				keys = append(keys, strings.TrimPrefix(o.Key, "run/checkpoints/"+name+"/"))
			}
			must.Eq(t, tc.objects, keys)

			must.Eq(t, tc.files, restoreLatest(t, st, name))
		})
	}
}

// A manifest object whose carried bytes were changed, cut short or
// extended is refused by restore, which falls back to the checkpoint
// before it.
func TestInlineCorruptionIsCaught(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		mangle func(carried []byte) []byte
		want   string
	}{
		{"flipped", func(b []byte) []byte { b[0] ^= 1; return b }, "sha256"},
		{"cut short", func(b []byte) []byte { return b[:len(b)-1] }, "ends"},
		{"extended", func(b []byte) []byte { return append(b, 'x') }, "after its files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.NewBucket(t)}, objstore.Config{})
			must.NoError(t, err)
			w, err := OpenObject(ctx, st, "run", Policy{}, WithLocalDir(t.TempDir()))
			must.NoError(t, err)
			commit := func(content string) string {
				s, err := w.Stage()
				must.NoError(t, err)
				writeTree(t, s.Dir(), map[string]string{"a": content, "b": "second"})
				name, err := w.Commit(s, Record{Step: 1})
				must.NoError(t, err)
				return name
			}
			first := commit("first")
			second := commit("later")
			must.NoError(t, w.Close())

			key := "run/checkpoints/" + second + "/" + ManifestFile
			_, doc, carried := getManifestObject(t, st, key)
			must.EqOp(t, "latersecond", string(carried))
			putManifestObject(t, st, key, tc.mangle(carried), doc)

			ro, err := OpenObjectReadOnly(ctx, st, "run", Policy{}, WithLocalDir(t.TempDir()))
			must.NoError(t, err)
			defer ro.Close()
			res, err := ro.LatestIntact()
			must.NoError(t, err)
			must.EqOp(t, first, res.Name)
			must.SliceLen(t, 1, res.Skipped)
			must.ErrorIs(t, res.Skipped[0].Err, ErrCorruptCheckpoint)
			must.ErrorContains(t, res.Skipped[0].Err, tc.want)
		})
	}
}

// getManifestObject reads and parses the manifest object at key.
func getManifestObject(t *testing.T, st *objstore.Store, key string) (m Manifest, doc, carried []byte) {
	t.Helper()
	rc, _, err := st.Get(context.Background(), key)
	must.NoError(t, err)
	defer rc.Close()
	obj, err := io.ReadAll(rc)
	must.NoError(t, err)
	m, doc, carried, err = parseManifestObject(obj)
	must.NoError(t, err)
	return m, doc, carried
}

// putManifestObject writes a manifest object of the given parts at key,
// laid out as a writer lays it out.
func putManifestObject(t *testing.T, st *objstore.Store, key string, carried, doc []byte) {
	t.Helper()
	obj := appendTrailer(append(slices.Clone(carried), doc...), len(doc))
	_, err := st.Put(context.Background(), key, bytes.NewReader(obj))
	must.NoError(t, err)
}

func FuzzParseManifestObject(f *testing.F) {
	doc, err := EncodeManifest(Manifest{Files: []FileSum{
		{Path: "a", Size: 3, SHA256: strings.Repeat("0", 64), Inline: true},
		{Path: "b", Size: 1 << 30, SHA256: strings.Repeat("1", 64)},
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(append(doc, "abc"...))                                  // before trailers
	f.Add(appendTrailer(append([]byte("abc"), doc...), len(doc))) // with one
	f.Add(appendTrailer(append([]byte("ab"), doc...), len(doc)))
	f.Add(doc[:len(doc)-1])
	f.Add([]byte(`{"format_version":1}` + "\nxyz"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, doc, carried, err := parseManifestObject(b)
		if err != nil {
			return
		}
		// What it accepts is a manifest DecodeManifest takes again, whose
		// inline files are exactly the bytes it carries.
		again, err := DecodeManifest(doc)
		must.NoError(t, err)
		must.Eq(t, m, again)
		must.NoError(t, checkCarried(m, carried))
		_, _ = copyInline(m, carried, t.TempDir())
	})
}

// A manifest object bigger than one part (a manifest of very many small
// files) is streamed up instead of read ahead into a part's buffer, and
// restores whole.
func TestManifestObjectBiggerThanAPart(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.Bucket}, objstore.Config{PartSize: objstore.MinPartSize})
	must.NoError(t, err)
	w, err := OpenObject(ctx, st, "run", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	defer w.Close()
	files := map[string]string{}
	long := strings.Repeat("p", 190)
	for i := range 4096 {
		files[fmt.Sprintf("shards/%s-%04d", long, i)] = strings.Repeat(string(rune('a'+i%26)), 1000)
	}
	s, err := w.Stage()
	must.NoError(t, err)
	writeTree(t, s.Dir(), files)
	name, err := w.Commit(s, Record{Step: 1})
	must.NoError(t, err)
	must.NoError(t, w.flushed()) // its record, written in the background
	info, err := st.Head(ctx, "run/checkpoints/"+name+"/"+ManifestFile)
	must.NoError(t, err)
	must.Greater(t, st.PartSize(), info.Size)

	must.Eq(t, files, restoreLatest(t, st, name))
}

// restoreLatest restores run's latest intact checkpoint, which must be
// name, into a fresh directory and returns its files.
func restoreLatest(t *testing.T, st *objstore.Store, name string) map[string]string {
	t.Helper()
	ro, err := OpenObjectReadOnly(context.Background(), st, "run", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	defer ro.Close()
	res, err := ro.LatestIntact()
	must.NoError(t, err)
	must.EqOp(t, name, res.Name)
	return readTree(t, res.Path)
}

// A manifest object begins with the files it carries and ends with the
// manifest and its trailer; one written before trailers (the manifest
// first) still restores.
func TestManifestObjectLayouts(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.Bucket}, objstore.Config{})
	must.NoError(t, err)
	w, err := OpenObject(ctx, st, "run", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	files := map[string]string{"a.bin": "first file", "b.json": `{"step": 1}`}
	s, err := w.Stage()
	must.NoError(t, err)
	writeTree(t, s.Dir(), files)
	name, err := w.Commit(s, Record{Step: 1})
	must.NoError(t, err)
	must.NoError(t, w.Close())

	key := "run/checkpoints/" + name + "/" + ManifestFile
	rc, _, err := st.Get(ctx, key)
	must.NoError(t, err)
	obj, err := io.ReadAll(rc)
	rc.Close()
	must.NoError(t, err)
	must.StrHasPrefix(t, `first file{"step": 1}{`, string(obj))
	must.StrHasSuffix(t, "\n"+manifestTrailer, string(obj[:len(obj)-21]))

	_, doc, carried := getManifestObject(t, st, key)
	_, err = st.Put(ctx, key, bytes.NewReader(append(slices.Clone(doc), carried...)))
	must.NoError(t, err)
	must.Eq(t, files, restoreLatest(t, st, name))
}
