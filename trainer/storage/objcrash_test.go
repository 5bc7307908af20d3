package storage

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// Environment of the S3 crash helper: the server and bucket, and where to
// stop.
const (
	envObjCrash      = "STORAGE_OBJ_CRASH" // endpoint|bucket|access|secret|region
	envObjCrashPoint = "STORAGE_OBJ_CRASH_POINT"
	envObjCrashDir   = "STORAGE_OBJ_CRASH_DIR"   // the local directory, owned by the parent
	envObjCrashRanks = "STORAGE_OBJ_CRASH_RANKS" // "1": commit as a gang does
)

// objCrashFiles are bigger than one part, so a kill can leave an
// unfinished multipart upload.
var objCrashFiles = []struct {
	name string
	size int
}{
	{"model.bin", 11 << 20},
	{"meta/info.json", 1000},
}

const objCrashTTL = 2 * time.Second

func objCrashStore(t *testing.T, srv *s3test.Server, bucket string) *objstore.Store {
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: bucket, Prefix: "p"},
		objstore.Config{PartSize: objstore.MinPartSize})
	must.NoError(t, err)
	return st
}

// TestObjectCrashHelper is the child process of TestObjectCrash: it
// commits checkpoints to S3 and stops at a named point of checkpoint 1's
// commit until the parent kills it.
func TestObjectCrashHelper(t *testing.T) {
	spec := os.Getenv(envObjCrash)
	if spec == "" {
		t.Skip("helper process for TestObjectCrash")
	}
	f := strings.Split(spec, "|")
	srv := &s3test.Server{Endpoint: f[0], AccessKey: f[2], SecretKey: f[3], Region: f[4]}
	point := os.Getenv(envObjCrashPoint)
	stopAt := func(p string) {
		if p == point {
			fmt.Printf("AT %s\n", p)
			time.Sleep(time.Hour) // the parent kills us here
		}
	}
	r, err := OpenObject(context.Background(), objCrashStore(t, srv, f[1]), "run", Policy{NumToKeep: 1},
		WithLeaseTTL(objCrashTTL), WithLocalDir(os.Getenv(envObjCrashDir)))
	must.NoError(t, err)
	for index := int64(0); index < 2; index++ {
		must.NoError(t, r.Append(Record{Step: 2 * index}))
		if index == 1 {
			r.hook.Store(&stopAt)
		}
		if os.Getenv(envObjCrashRanks) == "1" {
			commitAsRanks(t, r, index)
		} else {
			s, err := r.Stage()
			must.NoError(t, err)
			for _, f := range objCrashFiles {
				must.NoError(t, writeChunked(s.Dir(), f.name, crashContent(index, f.name, f.size), func() {}))
			}
			_, err = r.Commit(s, Record{Step: crashRecordStep(index)})
			must.NoError(t, err)
		}
		if index == 1 {
			must.NoError(t, r.flushed())
			stopAt(pointDone)
		}
	}
	// A point reached in the background (retention's) stops that
	// goroutine; this one waits for the kill too.
	time.Sleep(time.Hour)
}

// commitAsRanks commits checkpoint index as a gang does: each of
// objCrashFiles is one rank's, uploaded from its own node's directory;
// the last is the writer's own (rank 0's), whose small file the manifest
// carries.
func commitAsRanks(t *testing.T, r *ObjectRun, index int64) {
	name, err := r.Reserve()
	must.NoError(t, err)
	var all []FileSum
	var own InlineFiles
	for i, f := range objCrashFiles {
		node := filepath.Join(os.Getenv(envObjCrashDir), fmt.Sprintf("node%d", i))
		rs, err := NewRankStore(context.Background(), r.st, "run", node)
		must.NoError(t, err)
		dir := filepath.Join(node, fmt.Sprintf("rank%d-%d", i, index))
		must.NoError(t, writeChunked(dir, f.name, crashContent(index, f.name, f.size), func() {}))
		var sums []FileSum
		if i == len(objCrashFiles)-1 {
			sums, own, err = rs.UploadLarge(name, dir)
			must.SliceNotEmpty(t, own.Files)
		} else {
			sums, err = rs.Upload(name, dir)
		}
		must.NoError(t, err)
		all = append(all, sums...)
	}
	must.NoError(t, r.CommitFiles(name, Record{Step: crashRecordStep(index)}, all, own))
}

func TestObjectCrash(t *testing.T) {
	for _, ranks := range []bool{false, true} {
		t.Run(fmt.Sprintf("ranks=%v", ranks), func(t *testing.T) { testObjectCrash(t, ranks) })
	}
}

func testObjectCrash(t *testing.T, ranks bool) {
	srv := s3test.Start(t)
	for _, tc := range []struct {
		point  string
		latest int64
		// read is the reader's latest before any repair: a checkpoint
		// whose record is not written yet is not seen until the next
		// writer rebuilds its record from the manifest. -1: either
		// (the record's segment is being written in the background).
		read int64
	}{
		{pointFileUploaded, 0, 0},
		{pointUploaded, 0, 0},
		{pointManifested, 1, 0},
		{pointRecorded, 1, -1},
		{pointFlushed, 1, 1},
		{pointUnmanifestd, 1, 1},
		{pointDone, 1, 1},
	} {
		if ranks && tc.point == pointFileUploaded {
			continue // a rank's upload has no crash points of the writer's
		}
		t.Run(tc.point, func(t *testing.T) {
			bucket := srv.NewBucket(t)
			killObjChildAt(t, srv, bucket, tc.point, ranks)
			st := objCrashStore(t, srv, bucket)
			ctx := context.Background()

			// A reader, before any repair, sees only whole checkpoints.
			ro, err := OpenObjectReadOnly(ctx, st, "run", Policy{}, WithLocalDir(t.TempDir()))
			must.NoError(t, err)
			res, err := ro.LatestIntact()
			must.NoError(t, err)
			must.SliceEmpty(t, res.Skipped)
			read := tc.read
			if read < 0 && res.Name == checkpointName(0) {
				read = 0
			} else if read < 0 {
				read = 1
			}
			must.EqOp(t, checkpointName(read), res.Name, must.Sprint("reader's latest"))
			checkObjCrashFiles(t, res.Path, read)
			must.NoError(t, ro.Close())

			// The next writer waits out the dead writer's lease and repairs.
			w, err := OpenObject(ctx, st, "run", Policy{NumToKeep: 1}, WithLeaseTTL(objCrashTTL), WithLocalDir(t.TempDir()))
			must.NoError(t, err)
			defer w.Close()
			t.Logf("recovery: %+v", w.Recovery())
			res, err = w.LatestIntact()
			must.NoError(t, err)
			must.EqOp(t, checkpointName(tc.latest), res.Name)
			checkObjCrashFiles(t, res.Path, tc.latest)
			ckpts, err := w.listCheckpoints()
			must.NoError(t, err)
			for name, c := range ckpts {
				must.True(t, c.manifest, must.Sprintf("%s: no objects without a manifest remain", name))
			}
			must.MapLen(t, 1, ckpts, must.Sprint("retention left only the latest"))
			ups, err := st.ListMultipartUploads(ctx, "")
			must.NoError(t, err)
			must.SliceEmpty(t, ups)
			// The run goes on.
			s, err := w.Stage()
			must.NoError(t, err)
			writeTree(t, s.Dir(), map[string]string{"x": "y"})
			_, err = w.Commit(s, Record{Step: 1000})
			must.NoError(t, err)
		})
	}
}

func checkObjCrashFiles(t *testing.T, dir string, index int64) {
	t.Helper()
	for _, f := range objCrashFiles {
		got, err := os.ReadFile(dir + "/" + f.name)
		must.NoError(t, err)
		must.Eq(t, sha256.Sum256(crashContent(index, f.name, f.size)), sha256.Sum256(got))
	}
}

// killObjChildAt starts the helper and SIGKILLs it once it printed
// "AT point". A killed helper runs no cleanup of its own, so every
// directory it writes is one this test owns and removes: its local
// directory, and its TMPDIR (where its testing package makes its own).
func killObjChildAt(t *testing.T, srv *s3test.Server, bucket, point string, ranks bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestObjectCrashHelper$", "-test.count=1")
	local, tmp := t.TempDir(), t.TempDir()
	cmd.Env = append(os.Environ(),
		envObjCrash+"="+strings.Join([]string{srv.Endpoint, bucket, srv.AccessKey, srv.SecretKey, srv.Region}, "|"),
		envObjCrashPoint+"="+point, envObjCrashDir+"="+local, "TMPDIR="+tmp,
		envObjCrashRanks+"="+map[bool]string{true: "1"}[ranks])
	defer func() {
		// Checked where the helper was told to write, not by what appears
		// in the system temporary directory, which other tests on the
		// machine write to as well.
		mine, err := os.ReadDir(local)
		must.NoError(t, err)
		must.SliceNotEmpty(t, mine, must.Sprint("the killed helper kept its files outside the directory this test removes"))
	}()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	must.NoError(t, err)
	must.NoError(t, cmd.Start())
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, out)
	}()
	for got := false; !got; {
		line, ok := <-lines
		if !ok {
			cmd.Wait()
			t.Fatalf("helper exited before %q: %s", point, stderr.String())
		}
		got = line == "AT "+point
	}
	must.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	for range lines {
	}
	status, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	must.True(t, ok && status.Signaled() && status.Signal() == syscall.SIGKILL, must.Sprintf("helper was not killed: %s", stderr.String()))
}
