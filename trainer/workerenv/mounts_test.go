package workerenv

import (
	"testing"

	"github.com/shoenig/test/must"
)

func TestHostPathOf(t *testing.T) {
	ms := []Mount{
		{Destination: "/mnt/shared", HostPath: "/srv/nfs"},
		{Destination: "/mnt/shared/fast", HostPath: "/srv/ssd", ReadOnly: true},
	}
	cases := []struct{ in, want string }{
		{"/mnt/shared", "/srv/nfs"},
		{"/mnt/shared/results/", "/srv/nfs/results"},
		{"/mnt/shared/fast/x", "/srv/ssd/x"}, // the deepest destination wins
		{"/mnt/sharedx/r", "/mnt/sharedx/r"}, // a prefix of a name is not a parent
		{"/mnt/shared/../etc", "/mnt/etc"},   // cleaned first: outside every mount
		{"relative/x", "relative/x"},         // destinations are absolute
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			must.Eq(t, tc.want, HostPathOf(ms, tc.in))
		})
	}
}

func TestMountsRoundTrip(t *testing.T) {
	ms := []Mount{{Destination: "/mnt/a", HostPath: "/srv/a"}, {Destination: "/d", HostPath: "/srv/d", ReadOnly: true}}
	v := EncodeMounts(ms)
	must.Eq(t, `[{"destination":"/mnt/a","host_path":"/srv/a"},{"destination":"/d","host_path":"/srv/d","read_only":true}]`, v)
	got, err := DecodeMounts(v)
	must.NoError(t, err)
	must.Eq(t, ms, got)
	must.Eq(t, "", EncodeMounts(nil))
	got, err = DecodeMounts("")
	must.NoError(t, err)
	must.SliceEmpty(t, got)
	_, err = DecodeMounts("{")
	must.ErrorContains(t, err, "decode NOMAD_TRAIN_MOUNTS")
	must.True(t, Reserved(Mounts)) // only the driver sets it
}
