package storage

import (
	"io"
	"sync/atomic"
)

// Progress counts what a checkpoint download (DownloadCheckpoint with
// WithProgress) has written: Total, once the manifest is read, is every
// byte it will write, and Done those written so far. Another goroutine
// may read it while the download runs.
type Progress struct {
	done, total atomic.Int64
}

// Done is how many of the checkpoint's bytes have been written.
func (p *Progress) Done() int64 { return p.done.Load() }

// Total is the size of the checkpoint's files, 0 until its manifest is
// read.
func (p *Progress) Total() int64 { return p.total.Load() }

// WithProgress has DownloadCheckpoint count what it writes into p.
func WithProgress(p *Progress) Option { return func(o *options) { o.progress = p } }

// start sets the total from the checkpoint's manifest.
func (p *Progress) start(m Manifest) {
	if p == nil {
		return
	}
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	p.total.Store(n)
}

func (p *Progress) add(n int64) {
	if p != nil {
		p.done.Add(n)
	}
}

// reader counts what is read from r, or is r when p is nil.
func (p *Progress) reader(r io.Reader) io.Reader {
	if p == nil {
		return r
	}
	return &progressReader{r: r, p: p}
}

type progressReader struct {
	r io.Reader
	p *Progress
}

func (c *progressReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.add(int64(n))
	return n, err
}
