package storage

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// On an object store, small checkpoint files ride inside the manifest
// object. A checkpoint of a few megabytes is then committed with one
// conditional PUT instead of one per file followed by the manifest's, and
// it still exists if and only if its manifest does. Big files go up as
// objects of their own, in parallel. The object is, in order:
//
//   - the carried files' bytes, in the manifest's order of the files
//     marked "inline": true;
//   - the manifest document (JSON, ending in a newline);
//   - a trailer: manifestTrailer, the document's length in 20 decimal
//     digits, a newline.
//
// The files come first so that one pass over them serves both hashes a
// commit needs: the object's SHA-256, which signs it, runs over them, and
// the first file's own SHA-256, for the manifest, is that hash's state
// after it. Objects written before this layout began with the document,
// followed by the files, and had no trailer; parseManifestObject reads
// both.
const (
	// inlineWhole: a checkpoint whose files add up to at most this goes
	// up whole inside its manifest (one request: below a few megabytes
	// an object store's per-request latency outweighs the transfer).
	inlineWhole = 4 << 20
	// inlineSmall and inlineSmallTotal: in a bigger checkpoint, files of
	// at most inlineSmall (metadata, RNG state, configs) ride in the
	// manifest, up to inlineSmallTotal in all.
	inlineSmall      = 64 << 10
	inlineSmallTotal = 1 << 20
)

// manifestTrailer begins the trailer that ends a manifest object.
const manifestTrailer = "nomad-train manifest "

// trailerLen is the length of a manifest object's trailer.
const trailerLen = len(manifestTrailer) + 20 + 1

// maxManifestObject bounds a manifest object with its inline files.
const maxManifestObject = maxManifestSize + inlineWhole + 1 + int64(trailerLen)

// planInline splits the files of one writer's part of a checkpoint (Path
// and Size; sorted or not) into those its manifest carries and those
// uploaded as objects. It does no I/O.
func planInline(files []FileSum) (inline, upload []FileSum) {
	var total int64
	for _, f := range files {
		total += f.Size
	}
	if total <= inlineWhole {
		return files, nil
	}
	var small int64
	for _, f := range files {
		if f.Size <= inlineSmall && small+f.Size <= inlineSmallTotal {
			small += f.Size
			inline = append(inline, f)
		} else {
			upload = append(upload, f)
		}
	}
	return inline, upload
}

// InlineFiles are files of a checkpoint left in a local directory for the
// writer to carry inside the manifest (see RankStore.UploadLarge and
// Sharded.CommitFiles). The zero value holds none.
type InlineFiles struct {
	Dir   string    `json:"dir,omitempty"`
	Files []FileSum `json:"files,omitempty"` // Path and Size; unhashed
}

// carried is what a manifest object carries: the files' bytes, which
// begin the object, their sums (marked Inline), and the object's SHA-256
// so far.
type carried struct {
	sums []FileSum
	data []byte
	h    hash.Hash
}

// readInline reads the listed files under dir, in order, into buf (grown
// when short; a writer reuses one, whose pages are already the process's)
// and hashes them: the object's hash runs over all of them, and gives the
// first file's SHA-256 on the way; the others are hashed alone as well. A
// file whose size changed since it was listed is an error: its bytes
// would not match the manifest. On error the buffer is still returned, in
// data.
func readInline(dir string, files []FileSum, buf []byte) (carried, error) {
	var size int64
	for _, f := range files {
		size += f.Size
	}
	c := carried{data: buf[:0], h: sha256.New()}
	if size > inlineWhole {
		return c, fmt.Errorf("%d bytes to carry in a manifest, more than %d", size, inlineWhole)
	}
	if int64(cap(buf)) < size {
		// Room for the manifest and the trailer too, usually.
		c.data = make([]byte, 0, size+64<<10)
	}
	c.data = c.data[:size]
	c.sums = make([]FileSum, len(files))
	var off int64
	for i, f := range files {
		part := c.data[off : off+f.Size]
		if err := readExactly(filepath.Join(dir, filepath.FromSlash(f.Path)), part); err != nil {
			return c, fmt.Errorf("reading %s: %w", f.Path, err)
		}
		c.h.Write(part)
		var sum []byte
		if i == 0 {
			sum = c.h.Sum(nil) // the object's hash has read only this file
		} else {
			s := sha256.Sum256(part)
			sum = s[:]
		}
		c.sums[i] = FileSum{Path: f.Path, Size: f.Size, SHA256: hex.EncodeToString(sum), Inline: true}
		off += f.Size
	}
	return c, nil
}

// finish appends the manifest document and the trailer to the carried
// files, making data the whole manifest object, and returns its SHA-256.
func (c *carried) finish(doc []byte) [sha256.Size]byte {
	n := len(c.data)
	c.data = appendTrailer(append(c.data, doc...), len(doc))
	c.h.Write(c.data[n:])
	var sum [sha256.Size]byte
	c.h.Sum(sum[:0])
	return sum
}

// appendTrailer appends the trailer of a manifest object whose document
// is docLen bytes long.
func appendTrailer(b []byte, docLen int) []byte {
	return fmt.Appendf(b, "%s%020d\n", manifestTrailer, docLen)
}

// readExactly fills b from the file at p, which must hold exactly len(b)
// bytes.
func readExactly(p string, b []byte) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.ReadFull(f, b); err != nil {
		return fmt.Errorf("changed size while being committed: %w", err)
	}
	if n, _ := f.Read(make([]byte, 1)); n > 0 {
		return errors.New("changed size while being committed: it grew")
	}
	return nil
}

// inlineBuffer lends a writer's one buffer for carried files.
type inlineBuffer chan []byte

func (b inlineBuffer) take() []byte {
	select {
	case buf := <-b:
		return buf
	default:
		return nil
	}
}

func (b inlineBuffer) give(buf []byte) {
	select {
	case b <- buf[:0]:
	default:
	}
}

// parseManifestObject splits a manifest object, in either layout, into
// its manifest, the manifest's own bytes (a document DecodeManifest
// takes, to keep beside a local copy) and the bytes of the files it
// carries, in the manifest's order.
func parseManifestObject(b []byte) (Manifest, []byte, []byte, error) {
	if int64(len(b)) > maxManifestObject {
		return Manifest{}, nil, nil, fmt.Errorf("manifest object is %d bytes, more than %d", len(b), maxManifestObject)
	}
	m, doc, files, err := parseTrailed(b)
	if errors.Is(err, errNoTrailer) {
		return parseLeading(b)
	}
	if err != nil {
		// The last bytes of an object written before trailers could look
		// like one (a carried file's end): read it as one.
		if m, doc, files, lerr := parseLeading(b); lerr == nil {
			return m, doc, files, nil
		}
	}
	return m, doc, files, err
}

var errNoTrailer = errors.New("no trailer")

// parseTrailed reads a manifest object laid out files, document,
// trailer.
func parseTrailed(b []byte) (Manifest, []byte, []byte, error) {
	if len(b) < trailerLen {
		return Manifest{}, nil, nil, errNoTrailer
	}
	tr := b[len(b)-trailerLen:]
	digits, ok := bytes.CutPrefix(tr[:trailerLen-1], []byte(manifestTrailer))
	if !ok || tr[trailerLen-1] != '\n' {
		return Manifest{}, nil, nil, errNoTrailer
	}
	n, err := strconv.ParseUint(string(digits), 10, 64)
	end := uint64(len(b) - trailerLen)
	if err != nil || n > end || n > maxManifestSize {
		return Manifest{}, nil, nil, fmt.Errorf("decoding manifest: bad trailer %q", tr)
	}
	doc := b[end-n : end : end]
	m, err := DecodeManifest(doc)
	if err != nil {
		return Manifest{}, nil, nil, err
	}
	files := b[: end-n : end-n]
	return m, doc, files, checkCarried(m, files)
}

// parseLeading reads a manifest object laid out document, files (the
// layout before trailers).
func parseLeading(b []byte) (Manifest, []byte, []byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return Manifest{}, nil, nil, fmt.Errorf("decoding manifest: %w", err)
	}
	end := dec.InputOffset()
	if end > maxManifestSize {
		return Manifest{}, nil, nil, fmt.Errorf("manifest is %d bytes, more than %d", end, maxManifestSize)
	}
	// EncodeManifest ends the document with a newline; the files start
	// after it.
	if end < int64(len(b)) && b[end] != '\n' {
		return Manifest{}, nil, nil, errors.New("decoding manifest: no newline after the document")
	}
	doc := append(b[:end:end], '\n')
	m, err := DecodeManifest(doc)
	if err != nil {
		return Manifest{}, nil, nil, err
	}
	files := b[min(end+1, int64(len(b))):]
	return m, doc, files, checkCarried(m, files)
}

// checkCarried checks that the carried bytes are as many as the
// manifest's inline files add up to.
func checkCarried(m Manifest, files []byte) error {
	var want int64
	for _, f := range m.Files {
		if f.Inline {
			want += f.Size
		}
	}
	switch have := int64(len(files)); {
	case want > inlineWhole:
		return fmt.Errorf("manifest carries %d bytes of files, more than %d", want, inlineWhole)
	case have < want:
		return fmt.Errorf("the manifest object ends %d bytes into its files, the manifest says %d", have, want)
	case have > want:
		return fmt.Errorf("the manifest object holds %d bytes after its files", have-want)
	}
	return nil
}

// copyInline writes the manifest's inline files under dir from the
// carried bytes (checked by checkCarried), hashing each.
func copyInline(m Manifest, files []byte, dir string) ([]FileSum, error) {
	var sums []FileSum
	var off int64
	for _, f := range m.Files {
		if !f.Inline {
			continue
		}
		sum, err := writeFileFrom(dir, f.Path, bytes.NewReader(files[off:off+f.Size]))
		if err != nil {
			return nil, err
		}
		sum.Inline = true
		sums = append(sums, sum)
		off += f.Size
	}
	return sums, nil
}

// writeFileFrom creates dir/rel (never replacing a file) from r, hashing
// what it writes.
func writeFileFrom(dir, rel string, r io.Reader) (FileSum, error) {
	if err := checkManifestPath(rel); err != nil {
		return FileSum{}, err
	}
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return FileSum{}, fmt.Errorf("restoring %s: %w", rel, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return FileSum{}, fmt.Errorf("restoring %s: %w", rel, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return FileSum{}, fmt.Errorf("restoring %s: %w", rel, err)
	}
	return FileSum{Path: rel, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
