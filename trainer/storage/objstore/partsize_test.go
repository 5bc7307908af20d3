package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// Parts keep to S3's limits (10,000 parts of 5 MiB to 5 GiB) whatever a
// body holds: a body 10,000 parts of PartSize hold is cut as before; one
// of known size into equal parts after the first; one of unknown size
// into parts that double every 1,000, which hold more than S3's 5 TiB
// object.
func TestPartSize(t *testing.T) {
	st := &Store{cfg: Config{PartSize: DefaultPartSize}}
	sum := func(known int64) (total int64, sizes map[int64]int) {
		sizes = map[int64]int{}
		for num := int32(1); num <= maxParts; num++ {
			p := st.partSize(num, known)
			must.Between(t, MinPartSize, p, MaxPartSize)
			if num > 1 {
				must.GreaterEq(t, st.partSize(num-1, known), p, must.Sprintf("part %d shrank", num))
			}
			if known >= 0 && total >= known {
				break
			}
			total += p
			sizes[p]++
		}
		return total, sizes
	}
	total, sizes := sum(-1)
	must.Greater(t, int64(5<<40), total)
	must.EqOp(t, 1000, sizes[DefaultPartSize])
	must.EqOp(t, 1000, sizes[2*DefaultPartSize])
	must.EqOp(t, 1000, sizes[512*DefaultPartSize])

	for _, known := range []int64{1 << 30, 78 << 30, 100 << 30, 5 << 40} {
		total, sizes := sum(known)
		must.GreaterEq(t, known, total, must.Sprint(known))
		if known <= int64(maxParts)*DefaultPartSize {
			must.MapLen(t, 1, sizes, must.Sprint(known))
			continue
		}
		must.MapLen(t, 2, sizes, must.Sprint(known)) // the first, then equal parts
		for p := range sizes {
			must.Zero(t, p%(1<<20), must.Sprint(known, " a part of whole MiB"))
		}
	}
}

// With S3's part limit brought down to 10, bodies past 10 parts of
// PartSize go up whole against the real server: one read from a file, in
// equal parts, and one of unknown size, in growing parts. A body past
// what even growing parts hold is refused, and its upload aborted.
func TestPutPastTheLimitOfParts(t *testing.T) {
	defer func(n int32) { maxParts = n }(maxParts)
	maxParts = 10
	st, _ := newStore(t, Config{PartSize: MinPartSize, Concurrency: 2})
	ctx := context.Background()
	data := randomBytes(60<<20, 11)
	check := func(key string, res PutResult, parts int) {
		t.Helper()
		must.EqOp(t, int64(len(data)), res.Size)
		must.EqOp(t, parts, res.Parts)
		must.Eq(t, sha256.Sum256(data), res.SHA256)
		rc, _, err := st.Get(ctx, key)
		must.NoError(t, err)
		got, err := io.ReadAll(rc)
		rc.Close()
		must.NoError(t, err)
		must.True(t, bytes.Equal(data, got))
	}

	// 5 MiB, then 9 parts of 7 MiB hold 60 MiB; 8 are needed.
	path := filepath.Join(t.TempDir(), "model.bin")
	must.NoError(t, os.WriteFile(path, data, 0o644))
	f, err := os.Open(path)
	must.NoError(t, err)
	defer f.Close()
	res, err := st.Put(ctx, "from-file", f)
	must.NoError(t, err)
	check("from-file", res, 9)

	// Unknown size: 5, 10, 20 and the last 25 MiB.
	res, err = st.Put(ctx, "stream", struct{ io.Reader }{bytes.NewReader(data)})
	must.NoError(t, err)
	check("stream", res, 4)

	// With 2 parts allowed, 5 and 10 MiB hold 15.
	maxParts = 2
	_, err = st.Put(ctx, "too-big", io.LimitReader(zeros{}, 15<<20+1))
	must.ErrorContains(t, err, "bigger than S3's 2 parts hold (after 15728640 bytes)")
	ups, err := st.ListMultipartUploads(ctx, "too-big")
	must.NoError(t, err)
	must.SliceEmpty(t, ups)
	res, err = st.Put(ctx, "just-fits", io.LimitReader(zeros{}, 15<<20))
	must.NoError(t, err)
	must.EqOp(t, 2, res.Parts)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
