package launch

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// syncWriter lets several prefixWriters share one destination: each whole
// line is one locked write, so lines of different workers never mix.
type syncWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (s *syncWriter) writeLine(prefix, line []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Write(append(append(make([]byte, 0, len(prefix)+len(line)), prefix...), line...))
}

// Write writes p, one or more whole lines (a logger's), in one locked write.
func (s *syncWriter) Write(p []byte) (int, error) {
	s.writeLine(nil, p)
	return len(p), nil
}

// printf writes one line of the launcher's own.
func (s *syncWriter) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format, args...)
}

// prefixWriter writes each complete line it receives to its destination
// with a prefix; a trailing partial line waits for its end or for flush.
type prefixWriter struct {
	dst    *syncWriter
	prefix []byte

	mu  sync.Mutex // guards buf
	buf []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.dst.writeLine(p.prefix, p.buf[:i+1])
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

// flush writes a last line that had no newline.
func (p *prefixWriter) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		p.dst.writeLine(p.prefix, append(p.buf, '\n'))
		p.buf = nil
	}
}
