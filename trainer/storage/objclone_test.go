package storage

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// A checkpoint cloned into another run (a PBT exploit) is committed there
// as that run's own: its big file copied by the server, not through this
// machine (a relay between them counts what it carries), its small files
// inside the new manifest, and it restores whole. A source whose objects
// or carried bytes do not match its manifest is not cloned, and leaves
// nothing behind.
func TestCloneCheckpoint(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeys(t)
	relay := s3test.NewRelay(t, srv.Endpoint)
	ctx := context.Background()
	st, err := objstore.Open(ctx, "s3://"+srv.Bucket+"/exp", objstore.Config{Endpoint: relay.Endpoint, Region: srv.Region,
		PathStyle: true, PartSize: objstore.MinPartSize})
	must.NoError(t, err)
	files := map[string]string{
		"model.bin": strings.Repeat("weights!", (inlineWhole+1<<20)/8),
		"meta.json": `{"epoch": 6}`,
	}
	donor, err := OpenObject(ctx, st, "donor", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	name := commitRS(t, donor, files, Record{Step: 7, Metrics: map[string]any{"loss": 0.5}})
	must.NoError(t, donor.Close())

	recv, err := OpenObject(ctx, st, "recv", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	own := commitRS(t, recv, map[string]string{"model.bin": "its own"}, Record{Step: 3})
	before := relay.Moved()
	got, err := recv.CloneCheckpoint("donor", name, Record{Step: 7, Metrics: map[string]any{"loss": 0.5, "cloned_from": "donor"}})
	must.NoError(t, err)
	must.Less(t, int64(1<<20), relay.Moved()-before, must.Sprint("bytes through this machine"))
	must.NoError(t, recv.flushed())

	ro, err := OpenObjectReadOnly(ctx, st, "recv", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	res, err := ro.LatestIntact()
	must.NoError(t, err)
	must.EqOp(t, got, res.Name)
	must.EqOp(t, int64(7), res.Record.Step)
	must.Eq(t, files, readTree(t, res.Path))
	must.NoError(t, ro.Close())

	// A source not as its manifest says.
	must.True(t, corruptInline(t, st, "donor/checkpoints/"+name+"/"+ManifestFile, "meta.json", []byte(`{"epoch": 9}`)))
	_, err = recv.CloneCheckpoint("donor", name, Record{Step: 7})
	must.ErrorIs(t, err, ErrCorruptCheckpoint)
	must.True(t, corruptInline(t, st, "donor/checkpoints/"+name+"/"+ManifestFile, "meta.json", []byte(`{"epoch": 6}`)))
	_, err = st.Put(ctx, "donor/checkpoints/"+name+"/extra", bytes.NewReader([]byte("x")))
	must.NoError(t, err)
	_, err = recv.CloneCheckpoint("donor", name, Record{Step: 7})
	must.ErrorIs(t, err, ErrCorruptCheckpoint)
	_, err = recv.CloneCheckpoint("donor", "checkpoint_000099", Record{Step: 7})
	must.ErrorIs(t, err, ErrNoCheckpoint)
	must.NoError(t, recv.Close())
	left, err := st.List(ctx, objstore.ListOptions{Prefix: "recv/checkpoints/"})
	must.NoError(t, err)
	var keys []string
	for _, o := range left {
		keys = append(keys, o.Key)
	}
	must.SliceContainsAll(t, []string{"recv/checkpoints/" + own + "/" + ManifestFile,
		"recv/checkpoints/" + got + "/" + ManifestFile, "recv/checkpoints/" + got + "/model.bin"}, keys)
}
