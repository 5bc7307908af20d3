package console

import (
	"testing"

	"github.com/shoenig/test/must"
)

func TestSplitRunLocation(t *testing.T) {
	for loc, want := range map[string][2]string{
		"s3://bkt/p/q/qs": {"s3://bkt/p/q", "qs"},
		"s3://bkt/qs":     {"s3://bkt", "qs"},
		"s3://bkt/qs/":    {"s3://bkt", "qs"},
	} {
		root, run, err := splitRunLocation(loc)
		must.NoError(t, err, must.Sprint(loc))
		must.Eq(t, want, [2]string{root, run}, must.Sprint(loc))
	}
	for _, bad := range []string{"s3://bkt", "s3://bkt/", "s3://key:secret@bkt/qs"} {
		_, _, err := splitRunLocation(bad)
		must.Error(t, err, must.Sprint(bad))
	}
}
