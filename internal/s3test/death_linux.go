package s3test

import (
	"os/exec"
	"syscall"
)

// setDeathSignal asks the kernel to kill the server when the test process
// dies, so a test binary killed by its timeout leaves no server behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
