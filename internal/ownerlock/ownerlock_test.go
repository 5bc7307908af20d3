//go:build unix

package ownerlock

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

const helperEnv = "OWNERLOCK_TEST_HELPER_DIR"

// TestMain makes this test binary an owner process when helperEnv is set:
// it creates one owned file and one owned directory, says where, and waits
// to be killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		f, err := CreateFile(dir, Pattern("region-", "*"))
		if err != nil {
			os.Exit(2)
		}
		d, lock, err := MkdirTemp(dir, Pattern("scratch-", "*"))
		if err != nil {
			os.Exit(2)
		}
		os.Stdout.WriteString(f.Name() + "\n" + d + "\n")
		time.Sleep(time.Hour) // hold both until killed
		runtime.KeepAlive(f)
		runtime.KeepAlive(lock)
	}
	os.Exit(m.Run())
}

// startOwner starts an owner process in dir and returns it with the file
// and directory it owns.
func startOwner(t *testing.T, dir string) (*exec.Cmd, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	must.NoError(t, err)
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	must.True(t, sc.Scan())
	file := sc.Text()
	must.True(t, sc.Scan())
	return cmd, file, sc.Text()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestSweepRemovesOnlyWhatDeadOwnersLeft(t *testing.T) {
	dir := t.TempDir()
	dead, deadFile, deadDir := startOwner(t, dir)
	_, liveFile, liveDir := startOwner(t, dir)

	// Entries of the same names that no owner ever locked: a directory
	// without a lock file, and a link, are never ours to remove.
	foreignDir := filepath.Join(dir, "scratch-1-foreign")
	must.NoError(t, os.Mkdir(foreignDir, 0o700))
	link := filepath.Join(dir, "region-1-link")
	must.NoError(t, os.Symlink(deadFile, link))
	otherName := filepath.Join(dir, "region-x-not-a-pid")
	must.NoError(t, os.WriteFile(otherName, nil, 0o600))

	match := func(name string) bool { return PIDNamed("region-")(name) || PIDNamed("scratch-")(name) }

	// Both owners live: nothing goes.
	removed, err := Sweep(dir, match)
	must.NoError(t, err)
	must.SliceEmpty(t, removed)

	must.NoError(t, dead.Process.Kill())
	dead.Wait()

	removed, err = Sweep(dir, match)
	must.NoError(t, err)
	slices.Sort(removed)
	want := []string{deadFile, deadDir}
	slices.Sort(want)
	must.Eq(t, want, removed)
	for _, p := range []string{liveFile, liveDir, filepath.Join(liveDir, LockFile), foreignDir, link, otherName} {
		must.True(t, exists(p), must.Sprintf("%s was removed", p))
	}
	must.False(t, exists(deadFile))
	must.False(t, exists(deadDir))
}

func TestOwnerOutlivesSweepsOfItsOwnEntries(t *testing.T) {
	dir := t.TempDir()
	f, err := CreateFile(dir, Pattern("region-", "*"))
	must.NoError(t, err)
	d, lock, err := MkdirTemp(dir, Pattern("scratch-", "*"))
	must.NoError(t, err)
	// A sweep in this very process must not take the locks either: flock
	// locks belong to open files, not to processes.
	removed, err := Sweep(dir, PIDNamed("region-"))
	must.NoError(t, err)
	must.SliceEmpty(t, removed)
	removed, err = Sweep(dir, PIDNamed("scratch-"))
	must.NoError(t, err)
	must.SliceEmpty(t, removed)

	// Closing is giving up ownership.
	must.NoError(t, f.Close())
	must.NoError(t, lock.Close())
	removed, err = Sweep(dir, func(string) bool { return true })
	must.NoError(t, err)
	must.Eq(t, 2, len(removed))
	must.False(t, exists(d))
}

func TestPIDNamed(t *testing.T) {
	cases := []struct {
		name string
		want bool
	}{
		{"nomad-train-123-run-abc", true},
		{"nomad-train-123-", true},
		{"nomad-train-run-abc", false},
		{"nomad-train-test-123", false},
		{"nomad-train--abc", false},
		{"nomad-train-12a-abc", false},
		{"nomad-train-123", false},
		{"other-123-abc", false},
	}
	match := PIDNamed("nomad-train-")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			must.Eq(t, c.want, match(c.name))
		})
	}
}

// Sweeps running all the while owners make, hold and remove their entries
// never take a held one: an entry a sweep takes between its creation and
// its lock is made again under a new name.
func TestSweepRacingOwners(t *testing.T) {
	dir := t.TempDir()
	stop := make(chan struct{})
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		for {
			select {
			case <-stop:
				return
			default:
				Sweep(dir, PIDNamed("e-"))
			}
		}
	}()
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for range 200 {
				f, err := CreateFile(dir, Pattern("e-", "*"))
				if err != nil {
					errs <- err
					return
				}
				d, lock, err := MkdirTemp(dir, Pattern("e-", "*"))
				if err != nil {
					errs <- err
					return
				}
				for _, p := range []string{f.Name(), filepath.Join(d, LockFile)} {
					if !exists(p) {
						errs <- fmt.Errorf("%s went while its owner held it", p)
						return
					}
				}
				os.Remove(f.Name())
				f.Close()
				os.RemoveAll(d)
				lock.Close()
			}
			errs <- nil
		}()
	}
	for range 4 {
		must.NoError(t, <-errs)
	}
	close(stop)
	<-swept
}
