//go:build unix

package console

import (
	"os"

	"golang.org/x/sys/unix"
)

// Terminal returns a Live on f when f is a terminal, else nil: the
// output then stays plain lines, for a file, a pipe or a CI log.
// TERM=dumb (an editor's shell) gets plain lines too.
func Terminal(f *os.File) *Live {
	if os.Getenv("TERM") == "dumb" {
		return nil
	}
	fd := int(f.Fd())
	if _, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err != nil {
		return nil
	}
	return NewLive(f, func() (int, int) {
		ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		if err != nil || ws.Col == 0 {
			return 80, 24
		}
		return int(ws.Col), int(ws.Row)
	})
}
