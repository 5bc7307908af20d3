package launch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/testtmp"
	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// TestMain turns this test binary into a fake worker when the launcher
// starts it with LOCAL_TEST_MODE set.
func TestMain(m *testing.M) {
	if mode := os.Getenv("LOCAL_TEST_MODE"); mode != "" && workerenv.IsWorker() {
		os.Exit(fakeWorker(mode))
	}
	testtmp.Main(m)
}

func fakeWorker(mode string) int {
	rank, _ := strconv.Atoi(os.Getenv(workerenv.RankHint))
	if dir := os.Getenv("LOCAL_TEST_PIDS"); dir != "" {
		os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())), nil, 0o644)
	}
	switch mode {
	case "echo":
		fmt.Printf("hello from %d of %s\nsecond line", rank, os.Getenv(workerenv.WorldSize))
		fmt.Fprintf(os.Stderr, "to stderr %d\n", rank)
		return 0
	case "fail-rank1":
		dir := os.Getenv("LOCAL_TEST_PIDS")
		if rank == 1 {
			// Fail only once the others listen for SIGTERM.
			for _, r := range []string{"ready-0", "ready-2"} {
				for {
					if _, err := os.Stat(filepath.Join(dir, r)); err == nil {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			ev, _ := json.Marshal(workerenv.Event{Kind: "worker_failed", Message: "bad thing on rank 1"})
			os.WriteFile(os.Getenv(workerenv.Events), append(ev, '\n'), 0o644)
			return workerenv.ExitUserError
		}
		// Others wait to be told to stop, and stop cleanly.
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("ready-%d", rank)), nil, 0o644)
		<-ch
		return 0
	case "die-once":
		// Rank 1's first process dies as if killed by the machine; its
		// replacement succeeds.
		marker := filepath.Join(os.Getenv("LOCAL_TEST_PIDS"), "died-1")
		if _, err := os.Stat(marker); rank == 1 && err != nil {
			os.WriteFile(marker, nil, 0o644)
			return workerenv.ExitInfraError
		}
		return 0
	case "stop-once":
		// Rank 1's first process is stopped on its own and exits as
		// stopped; its replacement finishes.
		marker := filepath.Join(os.Getenv("LOCAL_TEST_PIDS"), "stopped-1")
		if _, err := os.Stat(marker); rank == 1 && err != nil {
			os.WriteFile(marker, nil, 0o644)
			return workerenv.ExitStopped
		}
		return 0
	case "secret":
		// Report how the secret came, whether it can be changed, and how
		// many files under TMPDIR hold it (the test reads the pid dir and
		// storage path from there too).
		path := os.Getenv(workerenv.SecretFile)
		secret, err := os.ReadFile(path)
		if err != nil || len(secret) == 0 {
			fmt.Println("no secret:", err)
			return 1
		}
		onDisk := 0
		filepath.WalkDir(os.TempDir(), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, secret) {
					onDisk++
				}
			}
			return nil
		})
		writeErr := os.WriteFile(path, []byte("changed"), 0o600)
		fmt.Printf("secret path=%s len=%d sum=%x write-refused=%v on-disk=%d\n",
			path, len(secret), sha256.Sum256(secret), writeErr != nil, onDisk)
		return 0
	case "stranger":
		// Knock on the run's rendezvous server without the secret.
		addr := strings.TrimPrefix(os.Getenv(workerenv.Rendezvous), "embedded://")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := rendezvous.Dial(ctx, addr, []byte("not the secret"), nil); err == nil {
			return 1
		}
		return 0
	case "crashloop":
		return crashLoopWorker(rank)
	case "wait-term":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		<-ch
		return 0
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		// A grandchild in the same process group must go too.
		child := exec.Command("sleep", "300")
		child.Start()
		os.WriteFile(filepath.Join(os.Getenv("LOCAL_TEST_PIDS"), strconv.Itoa(child.Process.Pid)), nil, 0o644)
		fmt.Println("ready")
		time.Sleep(5 * time.Minute)
		return 0
	}
	return 99
}

// safeBuffer is a bytes.Buffer the test may read while workers write.
type safeBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func opts(t *testing.T, mode string, n int) (Options, *safeBuffer, string) {
	t.Helper()
	pids := t.TempDir()
	var out safeBuffer
	return Options{
		Command: os.Args[0], Args: []string{"-test.run=^$"},
		// The race runtime sleeps 1 s at exit unless told otherwise, which
		// would eat the stop grace period.
		Run: workerenv.Run{
			Env:        []string{"LOCAL_TEST_MODE=" + mode, "LOCAL_TEST_PIDS=" + pids, "GORACE=atexit_sleep_ms=0"},
			NumWorkers: n, Name: "t", StoragePath: t.TempDir(), MaxFailures: -1,
		},
		StopGrace: time.Second,
		Stdout:    &out, Stderr: &out,
	}, &out, pids
}

// noneLeft asserts that no process the test recorded is still alive.
func noneLeft(t *testing.T, pidDir string) {
	t.Helper()
	all, err := os.ReadDir(pidDir)
	must.NoError(t, err)
	var entries []os.DirEntry
	for _, e := range all {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			entries = append(entries, e)
		}
	}
	must.SliceNotEmpty(t, entries)
	deadline := time.Now().Add(5 * time.Second)
	for _, e := range entries {
		pid, _ := strconv.Atoi(e.Name())
		for {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			// Gone, or a zombie waiting for its (other) parent.
			if err != nil || strings.Contains(string(stat), ") Z ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d is still running", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestOutputIsPrefixedPerRank(t *testing.T) {
	o, out, _ := opts(t, "echo", 3)
	res, err := Launch(context.Background(), o)
	must.NoError(t, err)
	must.False(t, res.Failed())
	for r := 0; r < 3; r++ {
		must.StrContains(t, out.String(), fmt.Sprintf("[rank %d] hello from %d of 3\n", r, r))
		must.StrContains(t, out.String(), fmt.Sprintf("[rank %d] second line\n", r))
		must.StrContains(t, out.String(), fmt.Sprintf("[rank %d] to stderr %d\n", r, r))
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		must.True(t, strings.HasPrefix(line, "[rank "), must.Sprintf("line %q has no rank prefix", line))
	}
}

// The run secret reaches the workers as an inherited, sealed in-memory
// file: the same for every rank, unchangeable, and in no file under
// TMPDIR, so nothing of it outlives even a launcher killed with SIGKILL.
func TestSecretIsNeverOnDisk(t *testing.T) {
	o, out, _ := opts(t, "secret", 2)
	res, err := Launch(context.Background(), o)
	must.NoError(t, err)
	must.False(t, res.Failed(), must.Sprint(out.String()))
	var sums []string
	for r := range 2 {
		var sum string
		line := out.String()[strings.Index(out.String(), fmt.Sprintf("[rank %d] secret ", r)):]
		line = line[:strings.Index(line, "\n")]
		must.StrContains(t, line, "path="+secretFD+" len=64 ")
		must.StrContains(t, line, " write-refused=true on-disk=0")
		_, err := fmt.Sscanf(line[strings.Index(line, "sum="):], "sum=%s", &sum)
		must.NoError(t, err)
		sums = append(sums, sum)
	}
	must.Eq(t, sums[0], sums[1])
}

// A run's storage that cannot be written, or that another run of the
// same name holds, is one error before any worker starts, not a failure
// of every worker until the budget runs out.
func TestStorageCheckedBeforeWorkersStart(t *testing.T) {
	o, out, pids := opts(t, "echo", 2)
	held, err := storage.Open(o.StoragePath, o.Name, storage.Policy{})
	must.NoError(t, err)
	_, err = Launch(context.Background(), o)
	must.ErrorIs(t, err, storage.ErrLocked)
	must.ErrorContains(t, err, "is another run of t still going?")
	must.NoError(t, held.Close())

	o.StoragePath = filepath.Join(t.TempDir(), "a-file")
	must.NoError(t, os.WriteFile(o.StoragePath, nil, 0o644))
	_, err = Launch(context.Background(), o)
	must.ErrorContains(t, err, "creating run directory")

	must.Eq(t, "", out.String(), must.Sprint("a worker started"))
	entries, _ := os.ReadDir(pids)
	must.SliceEmpty(t, entries)
}

func TestFailedWorkerStopsTheRest(t *testing.T) {
	o, out, pids := opts(t, "fail-rank1", 3)
	res, err := Launch(context.Background(), o)
	must.NoError(t, err, must.Sprint(out.String()))
	must.True(t, res.Failed())
	must.Eq(t, workerenv.ExitUserError, res.Ranks[1].ExitCode)
	must.Eq(t, "bad thing on rank 1", res.Ranks[1].Message())
	must.Eq(t, 0, res.Ranks[1].Order)
	must.Eq(t, 0, res.Ranks[0].ExitCode, must.Sprintf("%+v", res.Ranks)) // stopped cleanly by SIGTERM
	must.Eq(t, 0, res.Ranks[2].ExitCode)
	noneLeft(t, pids)
}

// Ctrl-C (ctx cancelled): a worker that ignores SIGTERM is killed after the
// grace period, with its child.
func TestCancelKillsStubbornWorkers(t *testing.T) {
	o, out, pids := opts(t, "ignore-term", 2)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !strings.Contains(out.String(), "[rank 1] ready") || !strings.Contains(out.String(), "[rank 0] ready") {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	}()
	start := time.Now()
	res, err := Launch(ctx, o)
	must.NoError(t, err)
	must.Less(t, 30*time.Second, time.Since(start))
	for _, r := range res.Ranks {
		must.Eq(t, "SIGKILL", r.Signal)
		must.Eq(t, 128+9, r.ExitCode)
	}
	noneLeft(t, pids)
}

// Ctrl-C while the workers are still starting (a large num_workers) stops
// the start-up at once: no further worker starts, and those started are
// stopped and reaped, none left running.
func TestCancelDuringStartUp(t *testing.T) {
	o, _, _ := opts(t, "wait-term", 40)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o.afterStart = func(rank int) {
		if rank == 1 {
			cancel()
		}
	}
	res, err := Launch(ctx, o)
	must.NoError(t, err)
	must.Len(t, 2, res.Ranks) // ranks 0 and 1, none after the cancel

	st, err := ReadState(RunDir(o.StoragePath, o.Name))
	must.NoError(t, err)
	must.Eq(t, PhaseStopped, st.Phase)
	started := 0
	for _, w := range st.Workers {
		if w.PID == 0 {
			continue
		}
		started++
		must.False(t, w.Running)
		_, err := os.Stat(fmt.Sprintf("/proc/%d", w.PID))
		must.True(t, os.IsNotExist(err), must.Sprintf("worker pid %d still exists", w.PID))
	}
	must.Eq(t, 2, started)
}

func TestBadCommand(t *testing.T) {
	o, _, _ := opts(t, "echo", 2)
	o.Command = filepath.Join(t.TempDir(), "no-such-binary")
	_, err := Launch(context.Background(), o)
	must.ErrorContains(t, err, "start worker 0")
}

// The cause of a failed run comes first: a worker that failed by itself
// before the workers that only lost it or were stopped because of it,
// even when those ended earlier.
func TestFailuresCausesFirst(t *testing.T) {
	o := &Outcome{Ranks: []RankOutcome{
		{Rank: 0, ExitCode: workerenv.ExitPeerLost, Order: 1},
		{Rank: 1, ExitCode: 0, Order: 2},
		{Rank: 2, ExitCode: workerenv.ExitUserError, Order: 4},
		{Rank: 3, ExitCode: 128 + 9, Signal: "SIGKILL", Order: 3},
		{Rank: 4, ExitCode: workerenv.ExitStopped, Order: 0},
	}}
	var ranks []int
	for _, f := range o.Failures() {
		ranks = append(ranks, f.Rank)
	}
	must.Eq(t, []int{3, 2, 4, 0}, ranks)
}

// An infrastructure failure is survived by starting a replacement process
// for the rank; with no failure budget it fails the run instead.
func TestReplacesFailedWorker(t *testing.T) {
	o, out, pids := opts(t, "die-once", 3)
	res, err := Launch(context.Background(), o)
	must.NoError(t, err)
	must.False(t, res.Failed(), must.Sprint(out.String()))
	must.SliceLen(t, 1, res.Restarts)
	must.Eq(t, 1, res.Restarts[0].Rank)
	must.Eq(t, workerenv.ExitInfraError, res.Restarts[0].ExitCode)
	must.Eq(t, 1, res.Ranks[1].Restarts)
	must.StrContains(t, out.String(), "==> rank 1 failed: exited with code 3; starting a replacement")
	noneLeft(t, pids)

	o, out, _ = opts(t, "die-once", 3)
	o.MaxFailures = 0
	res, err = Launch(context.Background(), o)
	must.NoError(t, err)
	must.True(t, res.Failed(), must.Sprint(out.String()))
	must.SliceEmpty(t, res.Restarts)
}

// A worker that exits as stopped while the launcher is not stopping was
// stopped on its own (a SIGTERM to it alone, as Nomad's alloc stop sends):
// it is replaced, as Nomad replaces the allocation, and that is no failure,
// even with no failure budget at all.
func TestReplacesWorkerStoppedOnItsOwn(t *testing.T) {
	o, out, pids := opts(t, "stop-once", 3)
	o.MaxFailures = 0
	res, err := Launch(context.Background(), o)
	must.NoError(t, err)
	must.False(t, res.Failed(), must.Sprint(out.String()))
	must.SliceEmpty(t, res.Restarts)
	must.SliceLen(t, 1, res.Stopped)
	must.Eq(t, 1, res.Stopped[0].Rank)
	must.Eq(t, workerenv.ExitStopped, res.Stopped[0].ExitCode)
	must.Eq(t, 1, res.Ranks[1].Restarts)
	must.StrContains(t, out.String(), "==> rank 1 stopped on its own; starting a replacement")
	noneLeft(t, pids)
}

// A stranger at a local run's rendezvous server (here: a process without
// the run's secret) is refused and logged on the launcher's stderr, with
// no logger set up by the caller.
func TestStrangerIsLogged(t *testing.T) {
	o, out, _ := opts(t, "stranger", 1)
	res, err := Launch(context.Background(), o)
	must.NoError(t, err)
	must.False(t, res.Failed(), must.Sprint(out.String()))
	must.StrContains(t, out.String(), "[WARN]  nomad-train.rendezvous.rendezvous-server: refused connection")
}
