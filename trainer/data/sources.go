package data

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
)

// Zip joins sources of equal length record by record: record i is the
// concatenation of every source's record i (MNIST's image file and label
// file become one source of 785-byte records).
type Zip []Source

// Len implements Source; it is the shortest source's length.
func (z Zip) Len() int {
	if len(z) == 0 {
		return 0
	}
	n := z[0].Len()
	for _, s := range z[1:] {
		n = min(n, s.Len())
	}
	return n
}

// Record implements Source.
func (z Zip) Record(i int, dst []byte) ([]byte, error) {
	var err error
	for _, s := range z {
		if dst, err = s.Record(i, dst); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// Shards is a data set of fixed-size binary records spread over several
// files (shards) read as one: Size bytes per record, no header, the
// shards' records in the order of the files.
type Shards struct {
	Size  int
	files []*os.File
	ends  []int // ends[k] is the number of records in shards 0..k
}

// OpenShards opens shard files of size-byte records. A file whose length
// is not a multiple of size is an error.
func OpenShards(size int, paths ...string) (*Shards, error) {
	if size < 1 {
		return nil, fmt.Errorf("open shards: record size %d", size)
	}
	s := &Shards{Size: size}
	total := 0
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("open shards: %w", err)
		}
		s.files = append(s.files, f)
		st, err := f.Stat()
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("open shards: %w", err)
		}
		if st.Size()%int64(size) != 0 {
			s.Close()
			return nil, fmt.Errorf("open shards: %s has %d bytes, not a multiple of the record size %d", p, st.Size(), size)
		}
		total += int(st.Size() / int64(size))
		s.ends = append(s.ends, total)
	}
	return s, nil
}

// Len implements Source.
func (s *Shards) Len() int {
	if len(s.ends) == 0 {
		return 0
	}
	return s.ends[len(s.ends)-1]
}

// Record implements Source.
func (s *Shards) Record(i int, dst []byte) ([]byte, error) {
	if i < 0 || i >= s.Len() {
		return dst, fmt.Errorf("shard record %d outside [0,%d)", i, s.Len())
	}
	k := sort.SearchInts(s.ends, i+1)
	first := 0
	if k > 0 {
		first = s.ends[k-1]
	}
	dst = grow(dst, s.Size)
	if _, err := s.files[k].ReadAt(dst[len(dst)-s.Size:], int64(i-first)*int64(s.Size)); err != nil {
		return dst[:len(dst)-s.Size], fmt.Errorf("read shard record %d: %w", i, err)
	}
	return dst, nil
}

// Close closes every shard file.
func (s *Shards) Close() error {
	var first error
	for _, f := range s.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Lines is a text file of one record per line (CSV rows, JSON lines)
// opened for random access: OpenLines scans it once for the offsets of its
// lines, then Record reads only the line asked for. Empty lines are not
// records; a line's trailing "\r\n" or "\n" is not part of it.
type Lines struct {
	f      *os.File
	starts []int64 // byte offset of each record
	ends   []int64 // end offset of each record, without the newline
}

// OpenLines opens path and indexes its lines, skipping the first skip
// records (e.g. 1 for a CSV header).
func OpenLines(path string, skip int) (*Lines, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open lines: %w", err)
	}
	l := &Lines{f: f}
	r := bufio.NewReaderSize(f, 1<<16)
	var off int64
	for {
		line, err := r.ReadSlice('\n')
		for err == bufio.ErrBufferFull { // a line longer than the buffer
			var more []byte
			more, err = r.ReadSlice('\n')
			line = append(append([]byte(nil), line...), more...)
		}
		if len(line) > 0 {
			body := bytes.TrimRight(line, "\r\n")
			if len(body) > 0 {
				l.starts = append(l.starts, off)
				l.ends = append(l.ends, off+int64(len(body)))
			}
			off += int64(len(line))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("index lines of %s: %w", path, err)
		}
	}
	skip = min(max(skip, 0), len(l.starts))
	l.starts, l.ends = l.starts[skip:], l.ends[skip:]
	return l, nil
}

// Len implements Source.
func (l *Lines) Len() int { return len(l.starts) }

// Record implements Source.
func (l *Lines) Record(i int, dst []byte) ([]byte, error) {
	if i < 0 || i >= len(l.starts) {
		return dst, fmt.Errorf("line record %d outside [0,%d)", i, len(l.starts))
	}
	n := int(l.ends[i] - l.starts[i])
	dst = grow(dst, n)
	if _, err := l.f.ReadAt(dst[len(dst)-n:], l.starts[i]); err != nil {
		return dst[:len(dst)-n], fmt.Errorf("read line record %d: %w", i, err)
	}
	return dst, nil
}

// Close closes the file.
func (l *Lines) Close() error { return l.f.Close() }

// ParseCSVFloats decodes one CSV record of numbers into dst (appended).
func ParseCSVFloats(rec []byte, dst []float32) ([]float32, error) {
	fields, err := csv.NewReader(bytes.NewReader(rec)).Read()
	if err != nil {
		return dst, fmt.Errorf("parse CSV record: %w", err)
	}
	for k, f := range fields {
		v, err := strconv.ParseFloat(string(bytes.TrimSpace([]byte(f))), 32)
		if err != nil {
			return dst, fmt.Errorf("parse CSV field %d: %w", k, err)
		}
		dst = append(dst, float32(v))
	}
	return dst, nil
}

// ParseJSONLine decodes one JSON-lines record into v.
func ParseJSONLine(rec []byte, v any) error {
	if err := json.Unmarshal(rec, v); err != nil {
		return fmt.Errorf("parse JSON line: %w", err)
	}
	return nil
}
