package console

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/nomad-train/nomad-train/internal/english"
)

// Live writes scrolling output to a terminal with a live region (a
// progress bar, a trial table) kept under it and redrawn in place: each
// write of output first clears the region, and draws it again after the
// output's whole lines. It is for a terminal only; off one, the plain
// writer prints what it prints today.
type Live struct {
	w    io.Writer
	size func() (width, height int) // the terminal's, asked at each redraw; 0 when not known

	mu      sync.Mutex
	region  []string // guarded by mu: the lines shown, each cut to the width
	partial []byte   // guarded by mu: output after its last newline
}

// NewLive is a Live on the terminal w; size tells its columns and rows.
func NewLive(w io.Writer, size func() (width, height int)) *Live {
	return &Live{w: w, size: size}
}

// Write writes output above the region. A line is shown once it is
// whole, so that the region never cuts into it.
func (l *Live) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	i := bytes.LastIndexByte(l.partial, '\n')
	if i < 0 {
		return len(p), nil
	}
	var b bytes.Buffer
	l.clear(&b)
	b.Write(l.partial[:i+1])
	l.partial = append(l.partial[:0], l.partial[i+1:]...)
	l.draw(&b)
	if _, err := l.w.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Set replaces the region with s (lines; "" removes it). Lines are cut
// to the terminal's width, and a region taller than the terminal to its
// first rows, as the cursor cannot go back above the screen.
func (l *Live) Set(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b bytes.Buffer
	l.clear(&b)
	l.region = nil
	if s = strings.TrimRight(s, "\n"); s != "" {
		w, h := l.size()
		lines := strings.Split(s, "\n")
		if h > 2 && len(lines) > h-1 {
			more := len(lines) - (h - 2)
			lines = append(lines[:h-2], fmt.Sprintf("... %d more %s", more, english.Plural(more, "line", "lines")))
		}
		for _, line := range lines {
			l.region = append(l.region, fit(line, w-1)) // a full line would wrap the cursor
		}
	}
	l.draw(&b)
	l.w.Write(b.Bytes())
}

// Frame is Set: the tuner's trial table (tune.Framer).
func (l *Live) Frame(table string) { l.Set(table) }

// Finish ends the live region: with keep it stays on the screen as
// output, else it is removed. Output written after Finish scrolls as
// usual.
func (l *Live) Finish(keep bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b bytes.Buffer
	if keep && len(l.region) > 0 {
		b.WriteString("\n")
	} else {
		l.clear(&b)
	}
	l.region = nil
	if len(l.partial) > 0 {
		b.Write(l.partial)
		b.WriteString("\n")
		l.partial = l.partial[:0]
	}
	l.w.Write(b.Bytes())
}

// clear moves the cursor to the region's first line and erases from there
// to the end of the screen.
func (l *Live) clear(b *bytes.Buffer) {
	if len(l.region) == 0 {
		return
	}
	b.WriteString("\r")
	if n := len(l.region) - 1; n > 0 {
		fmt.Fprintf(b, "\x1b[%dA", n)
	}
	b.WriteString("\x1b[J")
}

// draw writes the region, leaving the cursor at the end of its last line.
func (l *Live) draw(b *bytes.Buffer) {
	b.WriteString(strings.Join(l.region, "\n"))
}
