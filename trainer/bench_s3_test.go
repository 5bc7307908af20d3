package trainer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// B6a: the cost of an asynchronous checkpoint every step on S3. One
// worker trains a 64 MiB model (16 Mi float32 parameters); a step is
// b6aPasses passes of a momentum update over every parameter (a stand-in
// for a forward and backward pass; the step time is reported too). Steps
// alternate in blocks between no checkpoint and a checkpoint of every
// parameter every step (written to the checkpoint directory, then
// Report, whose upload to the real S3 server goes on in the background).
// Reported: the median step time with checkpoints over the median without
// (goal <= 1.10), both measured inside the worker in the same run. A third
// kind of block is the floor: each step hashes 64 MiB (SHA-256, as every
// checkpoint's manifest needs) on another goroutine while it trains, and
// nothing else; hash/plain is what that alone costs the step on this
// machine, where the training and the hash share the cores' caches and
// memory. A fourth kind is the upload's own floor: each step starts a
// bare objstore.Put of 64 MiB from memory to the same server (after the
// previous one has ended, as the next checkpoint waits for the previous
// upload), with no checkpoint, manifest or local copy; put/plain is what
// moving the bytes to a server on the same cores costs the step.
// B6A_STAGING sets CheckpointConfig.Staging: "memory" (the default here:
// what a run that checkpoints every step should use) or "disk".
const (
	b6aParams = 16 << 20 // 64 MiB of float32
	b6aBlocks = 3        // blocks of each kind (plain, hash, put, checkpoint), in turn
	b6aSteps  = 5        // steps per block
	// b6aSettle is the untimed pause after a checkpoint or put block, for
	// its last upload to end.
	b6aSettle = 2 * time.Second
	b6aKinds  = 4 // plain, hash, put, checkpoint
)

// b6aPasses is the work of a step; B6A_PASSES changes it.
func b6aPasses() int {
	if n, err := strconv.Atoi(os.Getenv("B6A_PASSES")); err == nil && n > 0 {
		return n
	}
	return 24
}

// B6A_STEP=gemm makes a step mostly compute-bound, as a forward and
// backward pass is, where the default step (B6A_PASSES passes over the
// parameters) only streams memory: B6A_GEMMS (56) products of 256x256
// matrices, which stay in the core's cache, then one momentum pass over
// the parameters (the optimizer's update), about as long as the default
// step on the machine of BENCHMARKS.md.
func b6aGemms() int {
	if n, err := strconv.Atoi(os.Getenv("B6A_GEMMS")); err == nil && n > 0 {
		return n
	}
	return 56
}

// b6aMatmul is a single-threaded matrix product, the compute-bound part
// of a B6A_STEP=gemm step.
type b6aMatmul struct{ a, b, c []float32 }

const b6aDim = 256

func (m *b6aMatmul) product() {
	if m.a == nil {
		m.a, m.b, m.c = make([]float32, b6aDim*b6aDim), make([]float32, b6aDim*b6aDim), make([]float32, b6aDim*b6aDim)
		for i := range m.a {
			m.a[i], m.b[i] = float32(i%7)*0.01, float32(i%5)*0.01
		}
	}
	clear(m.c)
	for i := range b6aDim {
		ci := m.c[i*b6aDim : (i+1)*b6aDim]
		for k := range b6aDim {
			aik, bk := m.a[i*b6aDim+k], m.b[k*b6aDim:(k+1)*b6aDim]
			for j := range ci {
				ci[j] += aik * bk[j]
			}
		}
	}
}

// b6aStaging is where the benchmark's checkpoints are built.
func b6aStaging() string {
	if s := os.Getenv("B6A_STAGING"); s != "" {
		return s
	}
	return "memory"
}

// b6aTimes are the step times rank 0 measured, by kind.
type b6aTimes struct {
	Plain, Checkpoint, Hash, Put []time.Duration
	Write, Report                []time.Duration // of the steps with a checkpoint
	// CPU time used during the blocks of each kind, by the worker
	// process itself and by the S3 server (whose process the launching
	// benchmark names in B6A_SERVER_PID): where a checkpoint's work goes.
	// A checkpoint block's time includes b6aSettle after its last step.
	SelfPlain, SelfPut, SelfCheckpoint       time.Duration
	ServerPlain, ServerPut, ServerCheckpoint time.Duration
}

// b6aCPU returns the CPU time used so far by this process and by the
// server process (0 when it cannot be read).
func b6aCPU() (self, server time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile("/proc/" + os.Getenv("B6A_SERVER_PID") + "/stat")
	if err != nil {
		return self, 0
	}
	// The fields after the command name, which is in parentheses:
	// utime and stime are the 12th and 13th, in clock ticks (USER_HZ,
	// 100 on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return self, 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return self, time.Duration(ut+st) * 10 * time.Millisecond
}

func b6aTrain(out string) trainer.TrainFunc {
	return func(ctx context.Context, s *trainer.Session) error {
		if path := os.Getenv("B6A_CPUPROFILE"); path != "" { // the worker's own profile
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
		buf := make([]byte, 4*b6aParams)
		params := unsafe.Slice((*float32)(unsafe.Pointer(&buf[0])), b6aParams)
		vel := make([]float32, b6aParams)
		passes, gemms := b6aPasses(), 0
		if os.Getenv("B6A_STEP") == "gemm" {
			passes, gemms = 1, b6aGemms()
		}
		var mm b6aMatmul
		step := func() {
			for range gemms {
				mm.product()
			}
			for p := range passes {
				g := float32(p+1) * 1e-6
				for i := range params {
					vel[i] = 0.9*vel[i] + g*params[i] + g
					params[i] -= 0.01 * vel[i]
				}
			}
		}
		var times b6aTimes
		ref := bytes.Repeat([]byte{1}, len(buf)) // what the hash and put blocks send
		floor, err := objstore.Open(ctx, os.Getenv("TRAINER_TEST_S3_URL")+"/b6a-floor", objstore.Config{PathStyle: true})
		if err != nil {
			return err
		}
		for block := range b6aKinds * b6aBlocks {
			hash, put, ckpt := block%b6aKinds == 1, block%b6aKinds == 2, block%b6aKinds == 3
			self0, server0 := b6aCPU()
			var putting sync.WaitGroup // the block's bare uploads, one at a time
			var putErr error
			for i := range b6aSteps {
				start := time.Now()
				var hashing sync.WaitGroup
				if hash {
					hashing.Go(func() { sha256.Sum256(ref) })
				}
				if put {
					putting.Wait()
					if putErr != nil {
						return putErr
					}
					putting.Go(func() { _, putErr = floor.Put(ctx, fmt.Sprintf("put-%d", i), bytes.NewReader(ref)) })
				}
				step()
				hashing.Wait()
				var ck *trainer.Checkpoint
				written := time.Now()
				if ckpt {
					dir, err := s.NewCheckpointDir()
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(dir, "model.bin"), buf, 0o644); err != nil {
						return err
					}
					ck = trainer.CheckpointFromDirectory(dir)
					times.Write = append(times.Write, time.Since(written))
				}
				reported := time.Now()
				if err := s.Report(ctx, trainer.Metrics{"p": params[0]}, ck); err != nil {
					return err
				}
				switch {
				case ckpt:
					times.Report = append(times.Report, time.Since(reported))
					times.Checkpoint = append(times.Checkpoint, time.Since(start))
				case hash:
					times.Hash = append(times.Hash, time.Since(start))
				case put:
					times.Put = append(times.Put, time.Since(start))
				default:
					times.Plain = append(times.Plain, time.Since(start))
				}
			}
			if ckpt || put {
				// Untimed: the block's last upload ends before the next
				// block, and its CPU is counted in this one.
				putting.Wait()
				if putErr != nil {
					return putErr
				}
				time.Sleep(b6aSettle)
			}
			self1, server1 := b6aCPU()
			switch {
			case ckpt:
				times.SelfCheckpoint += self1 - self0
				times.ServerCheckpoint += server1 - server0
			case put:
				times.SelfPut += self1 - self0
				times.ServerPut += server1 - server0
			case !hash:
				times.SelfPlain += self1 - self0
				times.ServerPlain += server1 - server0
			}
		}
		b, err := json.Marshal(times)
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	}
}

func BenchmarkB6aAsyncCheckpointStep(b *testing.B) {
	url := s3Storage(b)
	dir := os.Getenv("B6A_DIR") // set in the worker process
	if dir == "" {
		dir = b.TempDir()
		b.Setenv("B6A_DIR", dir)
	}
	out := filepath.Join(dir, "times.json")
	for i := 0; i < b.N; i++ {
		tr := trainer.New(b6aTrain(out), trainer.Scaling{NumWorkers: 1},
			trainer.Run{Name: fmt.Sprintf("b6a-%d", i), StoragePath: url,
				Checkpoint: trainer.CheckpointConfig{NumToKeep: 1, AsyncUpload: trainer.Async(true), Staging: b6aStaging()}}, nil)
		tr.Args = []string{"-test.run=^$", "-test.bench=^" + b.Name() + "$", "-test.benchtime=1x"}
		tr.Stdout, tr.Stderr = io.Discard, os.Stderr
		if _, err := tr.Fit(context.Background()); err != nil {
			b.Fatal(err)
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			b.Fatal(err)
		}
		var times b6aTimes
		if err := json.Unmarshal(raw, &times); err != nil {
			b.Fatal(err)
		}
		plain, ckpt := median(times.Plain), median(times.Checkpoint)
		b.ReportMetric(float64(plain.Milliseconds()), "plain-step-ms")
		b.ReportMetric(float64(ckpt.Milliseconds()), "ckpt-step-ms")
		b.ReportMetric(float64(ckpt)/float64(plain), "ckpt/plain")
		b.ReportMetric(float64(median(times.Hash))/float64(plain), "hash/plain")
		b.ReportMetric(float64(median(times.Put))/float64(plain), "put/plain")
		b.ReportMetric(float64(median(times.Write).Milliseconds()), "write-ms")
		b.ReportMetric(float64(median(times.Report).Milliseconds()), "report-ms")
		perStep := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b6aBlocks*b6aSteps) }
		b.ReportMetric(perStep(times.SelfPlain), "self-cpu-ms/plain-step")
		b.ReportMetric(perStep(times.SelfPut), "self-cpu-ms/put-step")
		b.ReportMetric(perStep(times.SelfCheckpoint), "self-cpu-ms/ckpt-step")
		b.ReportMetric(perStep(times.ServerPut), "server-cpu-ms/put-step")
		b.ReportMetric(perStep(times.ServerPlain), "server-cpu-ms/plain-step")
		b.ReportMetric(perStep(times.ServerCheckpoint), "server-cpu-ms/ckpt-step")
		if load, err := os.ReadFile("/proc/loadavg"); err == nil {
			nice := os.Getenv(s3test.EnvNice)
			if nice == "" {
				nice = "0"
			}
			b.Logf("staging %s, S3 server niceness %s, load average: %s", b6aStaging(), nice, strings.Fields(string(load))[0])
		}
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
