package executor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nomad-train/nomad-train/driver/executor"
)

// Start a task, wait for it, free it. This test binary doubles as the shim
// and as the task's program (see TestMain).
func ExampleStart() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	task, err := executor.Start(ctx, executor.Config{
		TaskID:     "example",
		Command:    os.Args[0],
		Args:       []string{"3"},
		Env:        []string{"EXECUTOR_TEST_WORKER=exit"},
		StdoutPath: filepath.Join(dir, "stdout"),
		StateDir:   filepath.Join(dir, "state"),
		ShimPath:   os.Args[0],
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := task.Wait(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := os.ReadFile(filepath.Join(dir, "stdout"))
	fmt.Printf("exit code %d, stdout %q\n", res.ExitCode, out)
	_ = task.Destroy(ctx, false)
	// Output: exit code 3, stdout "to stdout\n"
}
