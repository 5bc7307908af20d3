package objstore

import (
	"bytes"
	"context"
	"testing"

	"github.com/shoenig/test/must"
)

// ListDirs names each next path segment once, across pages (one key a
// page here), without the objects directly under the prefix; Any says
// whether a prefix holds anything.
func TestListDirs(t *testing.T) {
	st, _ := newStore(t, Config{ListPageSize: 1})
	ctx := context.Background()
	names, err := st.ListDirs(ctx, "")
	must.NoError(t, err)
	must.SliceEmpty(t, names)
	for _, k := range []string{"b/progress/1", "b/progress/2", "a/x", "a/y/z", "top", "exp/t1/progress/1", "exp/t2/p"} {
		_, err := st.Put(ctx, k, bytes.NewReader([]byte("1")))
		must.NoError(t, err)
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a", "b", "exp"}},
		{"a/", []string{"y"}},
		{"exp/", []string{"t1", "t2"}},
		{"none/", nil},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			names, err := st.ListDirs(ctx, tc.prefix)
			must.NoError(t, err)
			must.Eq(t, tc.want, names)
		})
	}
	_, err = st.ListDirs(ctx, "a")
	must.ErrorContains(t, err, "does not end in a slash")
	for prefix, want := range map[string]bool{"b/progress/": true, "a/progress/": false, "exp/t1/": true} {
		ok, err := st.Any(ctx, prefix)
		must.NoError(t, err)
		must.EqOp(t, want, ok, must.Sprint(prefix))
	}
}
