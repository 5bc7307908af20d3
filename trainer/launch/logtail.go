package launch

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Running reports whether the local run in runDir is still going.
func Running(runDir string) bool {
	st, err := ReadState(runDir)
	return err == nil && st.Phase == PhaseRunning
}

// LogTail copies what a rank's rotating log (LogPath) gained since the
// last copy. A file that was rotated (a new file at the path) is read from
// its start, after the rest of the old one, which rotation kept as
// path.1.
type LogTail struct {
	Path string
	fi   os.FileInfo // the file read last
	off  int64
}

// Copy writes to w what the log gained since the last Copy.
func (t *LogTail) Copy(w io.Writer) error {
	f, err := os.Open(t.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // between the rename and the new file
	}
	if err != nil {
		return fmt.Errorf("read log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("read log: %w", err)
	}
	if t.fi != nil && !os.SameFile(t.fi, fi) {
		// Rotated: the rest of the old file is path.1 now.
		if old, err := os.Open(t.Path + ".1"); err == nil {
			if oldFi, err := old.Stat(); err == nil && os.SameFile(oldFi, t.fi) {
				old.Seek(t.off, io.SeekStart)
				io.Copy(w, old)
			}
			old.Close()
		}
		t.off = 0
	}
	t.fi = fi
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return fmt.Errorf("read log: %w", err)
	}
	n, err := io.Copy(w, f)
	t.off += n
	if err != nil {
		return fmt.Errorf("read log: %w", err)
	}
	return nil
}
