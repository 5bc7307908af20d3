package storage

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// Environment of the crash helper process.
const (
	envCrashDir   = "STORAGE_CRASH_DIR"   // storage root
	envCrashPoint = "STORAGE_CRASH_POINT" // where to stop, or "random"
)

// Points the helper stops at besides the Run's own hooks.
const (
	pointWriting = "writing" // half of checkpoint 1's large file written
	pointDone    = "done"    // checkpoint 1 committed and pruned
	pointReady   = "ready"   // random mode: checkpoint 0 committed, looping
)

// crashFiles are the files of every checkpoint, with their sizes.
var crashFiles = []struct {
	name string
	size int
}{
	{"model.bin", 4 << 20},
	{"meta/info.json", 1000},
}

// crashContent is the content of a checkpoint's file, a function of the
// checkpoint index and the file name only, so the parent can verify it.
func crashContent(index int64, name string, size int) []byte {
	h := sha256.Sum256([]byte(name))
	rng := rand.NewChaCha8([32]byte(append(h[:24], fmt.Sprintf("%08d", index)...)))
	b := make([]byte, size)
	rng.Read(b)
	return b
}

// crashRecordStep is the step of the record that commits checkpoint index.
func crashRecordStep(index int64) int64 { return 2*index + 1 }

// TestCrashHelper is the child process of TestCrash: it writes checkpoints
// and stops at a named point until the parent kills it.
func TestCrashHelper(t *testing.T) {
	root := os.Getenv(envCrashDir)
	if root == "" {
		t.Skip("helper process for TestCrash")
	}
	point := os.Getenv(envCrashPoint)
	stopAt := func(p string) {
		if p == point {
			fmt.Printf("AT %s\n", p)
			time.Sleep(time.Hour) // the parent kills us here
		}
	}
	r, err := Open(root, "run", Policy{NumToKeep: 1, Fsync: FsyncCheckpointRecords})
	if err != nil {
		t.Fatal(err)
	}
	for index := int64(0); ; index++ {
		if err := r.Append(Record{Step: 2 * index, Metrics: map[string]any{"loss": 1 / float64(index+1)}}); err != nil {
			t.Fatal(err)
		}
		if index == 1 && point != "random" {
			r.hook = stopAt // stop in checkpoint 1's commit only
		}
		s, err := r.Stage()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range crashFiles {
			if err := writeChunked(s.Dir(), f.name, crashContent(index, f.name, f.size), func() {
				if index == 1 {
					stopAt(pointWriting)
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.Commit(s, Record{Step: crashRecordStep(index)}); err != nil {
			t.Fatal(err)
		}
		switch {
		case index == 0 && point == "random":
			fmt.Printf("AT %s\n", pointReady)
		case index == 1:
			stopAt(pointDone)
		}
	}
}

// writeChunked writes data in 256 KiB chunks, calling half once half of it is
// written.
func writeChunked(dir, name string, data []byte, half func()) error {
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	const chunk = 256 << 10
	for off := 0; off < len(data); off += chunk {
		if off >= len(data)/2 && off-chunk < len(data)/2 {
			half()
		}
		if _, err := f.Write(data[off:min(off+chunk, len(data))]); err != nil {
			return err
		}
	}
	return f.Close()
}

// startCrashChild starts the helper and returns once it printed "AT want",
// having killed it with SIGKILL after the delay.
func killChildAt(t *testing.T, root, point, want string, delay time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), envCrashDir+"="+root, envCrashPoint+"="+point)
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
	deadline := time.After(60 * time.Second)
	for got := false; !got; {
		select {
		case line, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("helper exited before %q: %s", want, stderr.String())
			}
			got = line == "AT "+want
		case <-deadline:
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("helper did not reach %q: %s", want, stderr.String())
		}
	}
	if delay == 0 {
		// The helper is paused holding the writer lock: a second writer in
		// another process is refused.
		_, err := Open(root, "run", Policy{})
		must.ErrorIs(t, err, ErrLocked)
	}
	time.Sleep(delay)
	must.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err = cmd.Wait()
	for range lines {
	}
	status, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	must.True(t, ok && status.Signaled() && status.Signal() == syscall.SIGKILL,
		must.Sprintf("helper was not killed by SIGKILL: %v; stderr: %s", err, stderr.String()))
}

// checkRecovered opens the run after a crash and checks the invariants:
// progress parses, Latest is a checkpoint whose record was written, its
// files are complete, and no scratch or uncommitted entries remain.
func checkRecovered(t *testing.T, root string, wantLatest int64, wantRecovery string) {
	t.Helper()
	dir := filepath.Join(root, "run")
	r, err := Open(root, "run", Policy{NumToKeep: 1})
	must.NoError(t, err)
	defer r.Close()
	recovery := fmt.Sprintf("%+v", r.Recovery())
	t.Logf("recovery: %s", recovery)
	must.RegexMatch(t, regexp.MustCompile(wantRecovery), recovery, must.Sprint("Open repaired what a kill at this point leaves"))

	data, err := os.ReadFile(filepath.Join(dir, ProgressFile))
	must.NoError(t, err)
	recs, err := ReadProgress(bytes.NewReader(data))
	must.NoError(t, err)
	must.True(t, len(data) == 0 || data[len(data)-1] == '\n', must.Sprint("no torn line is left"))

	name, path, ok, err := r.Latest()
	must.NoError(t, err)
	must.True(t, ok, must.Sprint("checkpoint 0 was committed before the crash"))
	index, _ := checkpointIndex(name)
	if wantLatest >= 0 {
		must.Eq(t, wantLatest, index)
	}
	last := recs[len(recs)-1]
	if last.Checkpoint != "" {
		must.Eq(t, name, last.Checkpoint)
	}
	var rec Record
	for _, x := range recs {
		if x.Checkpoint == name {
			rec = x
		}
	}
	must.Eq(t, crashRecordStep(index), rec.Step, must.Sprint("the latest checkpoint has a complete record"))
	for _, f := range crashFiles {
		got, err := os.ReadFile(filepath.Join(path, f.name))
		must.NoError(t, err)
		must.Eq(t, sha256.Sum256(crashContent(index, f.name, f.size)), sha256.Sum256(got),
			must.Sprintf("%s of %s is complete", f.name, name))
	}
	must.Eq(t, []string{".writer.lock", name, ProgressFile}, entries(t, dir),
		must.Sprint("only the latest checkpoint remains; no staging, trash or unrecorded directory"))

	// The run goes on: the next checkpoint gets a fresh index.
	next := commitT(t, r, map[string]string{"x": "y"}, Record{Step: 1000})
	nextIndex, _ := checkpointIndex(next)
	must.Greater(t, index, nextIndex)
	data, err = os.ReadFile(filepath.Join(dir, ProgressFile))
	must.NoError(t, err)
	after, err := ReadProgress(bytes.NewReader(data))
	must.NoError(t, err)
	must.Eq(t, len(recs)+1, len(after))
}

func TestCrash(t *testing.T) {
	if os.Getenv(envCrashDir) != "" {
		t.Skip("inside the helper")
	}
	points := []struct {
		point        string
		wantLatest   int64
		wantRecovery string // matches Open's Recovery, printed with %+v
	}{
		{pointWriting, 0, `^\{TornBytes:0 Removed:\[\.staging-\d+\] Pruned:\[\] Rebuilt:\[\]\}$`},
		{pointSynced, 0, `^\{TornBytes:0 Removed:\[\.staging-\d+\] Pruned:\[\] Rebuilt:\[\]\}$`},
		// Renamed with its manifest, the checkpoint is complete: Open
		// rebuilds its record rather than deleting it.
		{pointRenamed, 1, `^\{TornBytes:0 Removed:\[\] Pruned:\[checkpoint_000000\] Rebuilt:\[checkpoint_000001\]\}$`},
		{pointRecordPartial, 1, `^\{TornBytes:[1-9]\d* Removed:\[\] Pruned:\[checkpoint_000000\] Rebuilt:\[checkpoint_000001\]\}$`},
		{pointRecorded, 1, `^\{TornBytes:0 Removed:\[\] Pruned:\[checkpoint_000000\] Rebuilt:\[\]\}$`},
		{pointTrashed, 1, `^\{TornBytes:0 Removed:\[\.trash-checkpoint_000000-\w+\] Pruned:\[\] Rebuilt:\[\]\}$`},
		{pointDone, 1, `^\{TornBytes:0 Removed:\[\] Pruned:\[\] Rebuilt:\[\]\}$`},
	}
	for _, tc := range points {
		t.Run(tc.point, func(t *testing.T) {
			root := t.TempDir()
			killChildAt(t, root, tc.point, tc.point, 0)
			checkRecovered(t, root, tc.wantLatest, tc.wantRecovery)
		})
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("random kill delays from seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := range 4 {
		delay := time.Duration(rng.Int64N(int64(400 * time.Millisecond)))
		t.Run(fmt.Sprintf("random-%d-%s", i, delay.Round(time.Millisecond)), func(t *testing.T) {
			root := t.TempDir()
			killChildAt(t, root, "random", pointReady, delay)
			checkRecovered(t, root, -1, ``)
		})
	}
}

func TestCrashPointsAreReal(t *testing.T) {
	// Every point TestCrash stops at must be one the code passes through;
	// a renamed hook would make its case wait for nothing.
	var src []byte
	for _, f := range []string{"run.go", "commit.go"} {
		b, err := os.ReadFile(f)
		must.NoError(t, err)
		src = append(src, b...)
	}
	for _, p := range []string{"pointSynced", "pointRenamed", "pointRecordPartial", "pointRecorded", "pointTrashed"} {
		must.True(t, strings.Contains(string(src), "r.callHook("+p+")"), must.Sprintf("the package calls the hook at %s", p))
	}
}
