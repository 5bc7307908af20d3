//go:build !linux

package s3test

import "os/exec"

// setDeathSignal does nothing where the kernel has no parent-death signal;
// the test's cleanup still stops the server.
func setDeathSignal(*exec.Cmd) {}
