package storage

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// On an object store, small checkpoint files ride inside the manifest
// object: its JSON (the manifest, with "inline": true on those files),
// then their bytes in the manifest's order. A checkpoint of a few
// megabytes is then committed with one conditional PUT instead of one
// per file followed by the manifest's, and it still exists if and only if
// its manifest does. Big files go up as objects of their own, in
// parallel.
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

// maxManifestObject bounds a manifest object with its inline files.
const maxManifestObject = maxManifestSize + inlineWhole + 1

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

// readInline reads the listed files under dir, in order, into buf (grown
// when short; a writer reuses one, whose pages are already the process's)
// and returns their sums marked Inline, and the bytes. A file whose size
// changed since it was listed is an error: its bytes would not match the
// manifest.
func readInline(dir string, files []FileSum, buf []byte) ([]FileSum, []byte, error) {
	var size int64
	for _, f := range files {
		size += f.Size
	}
	if size > inlineWhole {
		return nil, nil, fmt.Errorf("%d bytes to carry in a manifest, more than %d", size, inlineWhole)
	}
	if int64(cap(buf)) < size {
		buf = make([]byte, size)
	}
	data := buf[:size]
	sums := make([]FileSum, len(files))
	var off int64
	for i, f := range files {
		part := data[off : off+f.Size]
		if err := readExactly(filepath.Join(dir, filepath.FromSlash(f.Path)), part); err != nil {
			return nil, nil, fmt.Errorf("reading %s: %w", f.Path, err)
		}
		sum := sha256.Sum256(part)
		sums[i] = FileSum{Path: f.Path, Size: f.Size, SHA256: hex.EncodeToString(sum[:]), Inline: true}
		off += f.Size
	}
	return sums, data, nil
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

// readManifestObject decodes the manifest at the head of a manifest
// object. It returns the manifest, its own bytes (a document
// DecodeManifest takes, to keep beside a local copy) and a reader of the
// inline files' bytes, which follow it in the manifest's order.
func readManifestObject(r io.Reader) (Manifest, []byte, io.Reader, error) {
	lim := io.LimitReader(r, maxManifestObject)
	var head bytes.Buffer
	dec := json.NewDecoder(io.TeeReader(lim, &head))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return Manifest{}, nil, nil, fmt.Errorf("decoding manifest: %w", err)
	}
	end := dec.InputOffset()
	if end > maxManifestSize {
		return Manifest{}, nil, nil, fmt.Errorf("manifest is %d bytes, more than %d", end, maxManifestSize)
	}
	rest := bufio.NewReader(io.MultiReader(dec.Buffered(), lim))
	// EncodeManifest ends the document with a newline; the inline bytes
	// start after it.
	if nl, err := rest.ReadByte(); err == nil && nl != '\n' {
		return Manifest{}, nil, nil, errors.New("decoding manifest: no newline after the document")
	}
	doc := append(head.Bytes()[:end:end], '\n')
	m, err := DecodeManifest(doc)
	if err != nil {
		return Manifest{}, nil, nil, err
	}
	var inline int64
	for _, f := range m.Files {
		if f.Inline {
			inline += f.Size
		}
	}
	if inline > inlineWhole {
		return Manifest{}, nil, nil, fmt.Errorf("manifest carries %d bytes of files, more than %d", inline, inlineWhole)
	}
	return m, doc, rest, nil
}

// copyInline writes the manifest's inline files under dir from the bytes
// that follow it, hashing each, and checks nothing else follows.
func copyInline(m Manifest, rest io.Reader, dir string) ([]FileSum, error) {
	var sums []FileSum
	for _, f := range m.Files {
		if !f.Inline {
			continue
		}
		sum, err := writeFileFrom(dir, f.Path, io.LimitReader(rest, f.Size))
		if err != nil {
			return nil, err
		}
		if sum.Size != f.Size {
			return nil, fmt.Errorf("%s: the manifest object ends %d bytes into it, the manifest says %d", f.Path, sum.Size, f.Size)
		}
		sum.Inline = true
		sums = append(sums, sum)
	}
	if n, _ := io.Copy(io.Discard, io.LimitReader(rest, 1)); n > 0 {
		return nil, errors.New("the manifest object holds bytes after its files")
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
