package executor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// BenchmarkStartToExit measures a task's Start+Wait+Destroy through the
// shim against running the same worker directly with os/exec, and reports
// the ratio: the cost of supervision (one extra process, the spec and
// exit files with their fsyncs).
func BenchmarkStartToExit(b *testing.B) {
	dir := b.TempDir()
	env := []string{envWorker + "=exit"}
	direct := func() {
		cmd := exec.Command(os.Args[0], "0")
		cmd.Env = env
		must.NoError(b, cmd.Run())
	}
	var directTotal, shimTotal time.Duration
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		begin := time.Now()
		direct()
		directTotal += time.Since(begin)

		begin = time.Now()
		task, err := Start(ctx, Config{TaskID: "bench", Command: os.Args[0], Args: []string{"0"}, Env: env,
			Dir: dir, StateDir: filepath.Join(dir, "state"), ShimPath: os.Args[0]}, nil)
		must.NoError(b, err)
		res, err := task.Wait(ctx)
		must.NoError(b, err)
		must.Eq(b, 0, res.ExitCode)
		must.NoError(b, task.Destroy(ctx, false))
		shimTotal += time.Since(begin)
	}
	b.ReportMetric(float64(shimTotal)/float64(directTotal), "shim/direct")
	b.ReportMetric(float64(shimTotal.Microseconds())/float64(b.N), "shim-us/op")
}
