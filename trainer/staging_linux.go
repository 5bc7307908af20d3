package trainer

import (
	"errors"
	"os"
	"syscall"
)

// shmDir is where Linux mounts its RAM-backed file system for all.
var shmDir = "/dev/shm"

// tmpfsMagic is the statfs type of tmpfs.
const tmpfsMagic = 0x01021994

// memoryFS returns the RAM-backed directory checkpoints can be staged in.
func memoryFS() (string, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(shmDir, &st); err != nil {
		return "", err
	}
	if st.Type != tmpfsMagic {
		return "", errors.New(shmDir + " is not a tmpfs")
	}
	return shmDir, nil
}

func ownedByMe(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
