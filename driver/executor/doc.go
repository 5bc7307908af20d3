// Package executor runs one task's process for the train task driver and
// keeps it alive independently of the plugin process.
//
// Start re-executes the driver binary as a supervisor shim (ShimArg) in its
// own session. The plugin opens Nomad's log FIFOs and hands them to the shim,
// which starts the worker as the leader of a new process group (optionally in
// a cgroup v2 directory with CPU and memory limits), waits for it and records
// the ExitResult atomically in the task's state directory, which it inherits
// open, never by path (a task may rename what is in its own directories). The plugin may die
// at any time: Recover reattaches from the persisted State, guarding pids
// against reuse with their start times.
//
// Stop signals the worker's process group, waits for the grace period and
// then SIGKILLs the whole group. Exec and ExecStreaming (optionally on a
// pseudo-terminal) run commands in the task's environment; Stats samples CPU
// and memory of the whole process tree or cgroup.
//
// The driver's main must hand control to the shim:
//
//	func main() {
//		if len(os.Args) > 1 && os.Args[1] == executor.ShimArg {
//			os.Exit(executor.ShimMain(os.Args[1:]))
//		}
//		self, _ := os.Executable()
//		task, err := executor.Start(ctx, executor.Config{
//			TaskID: "t1", Command: "/bin/echo", Args: []string{"hi"},
//			StateDir: dir, ShimPath: self,
//		}, logger)
//		if err != nil { ... }
//		res, err := task.Wait(ctx)
//		_ = task.Destroy(ctx, true)
//	}
package executor
