//go:build linux

package collective

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nomad-train/nomad-train/internal/ownerlock"
)

// bootIDFile holds a random identity of the running kernel: two processes
// that read the same value share a host (not necessarily a /dev/shm, which
// the nonce check settles).
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// hostIdentity returns this host's boot id.
func hostIdentity() (string, error) {
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		return "", fmt.Errorf("read host identity: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" || len(id) > hostIDMax {
		return "", fmt.Errorf("read host identity: unexpected boot id %q", id)
	}
	return id, nil
}

// defaultShmDir is /dev/shm when it exists, else the temporary directory.
func defaultShmDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// createRegion makes a new shared file of size bytes in dir, reserves its
// space (so a full tmpfs is an error now, not a SIGBUS later) and maps it
// read-write. The file is named for this process and locked for it
// (package ownerlock), so that once this process is gone, even killed in
// the moment before it removes the file, the next sweep (SweepRegions)
// knows the file for a stale one. The caller removes the file once the
// peer has mapped it, then closes f.
func createRegion(dir string, size int) (mem []byte, f *os.File, err error) {
	f, err = ownerlock.CreateFile(dir, ownerlock.Pattern(shmFilePrefix, "*"))
	if err != nil {
		return nil, nil, fmt.Errorf("create shared file: %w", err)
	}
	path := f.Name()
	defer func() {
		if err != nil {
			os.Remove(path)
			f.Close()
		}
	}()
	if len(path) > pathMax {
		return nil, nil, fmt.Errorf("shared file path %q is longer than %d bytes", path, pathMax)
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil {
		if !errors.Is(err, syscall.EOPNOTSUPP) {
			return nil, nil, fmt.Errorf("reserve %d bytes of shared memory: %w", size, err)
		}
		if err := f.Truncate(int64(size)); err != nil {
			return nil, nil, fmt.Errorf("size shared file: %w", err)
		}
	}
	mem, err = syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("map shared file: %w", err)
	}
	return mem, f, nil
}

// SweepRegions removes the shared files in dir (the default shared-memory
// directory when empty) that processes now gone left behind, and returns
// their paths. Files of live processes stay, whoever they belong to.
func SweepRegions(dir string) ([]string, error) {
	if dir == "" {
		dir = defaultShmDir()
	}
	removed, err := ownerlock.Sweep(dir, ownerlock.PIDNamed(shmFilePrefix))
	if err != nil {
		return removed, fmt.Errorf("sweep shared memory: %w", err)
	}
	return removed, nil
}

// openRegion maps the peer's shared file read-only after checking it is
// one of ours and exactly size bytes (mapping past its end would fault).
func openRegion(path string, size int) ([]byte, error) {
	if !filepath.IsAbs(path) || !strings.HasPrefix(filepath.Base(path), shmFilePrefix) {
		return nil, fmt.Errorf("refuse shared file %q: not one of ours", path)
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open shared file: %w", err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat shared file: %w", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Size != int64(size) {
		return nil, fmt.Errorf("shared file is not a regular file of %d bytes", size)
	}
	mem, err := syscall.Mmap(fd, 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map shared file: %w", err)
	}
	return mem, nil
}

// unmap releases a mapping made by createRegion or openRegion.
func unmap(mem []byte) error { return syscall.Munmap(mem) }
