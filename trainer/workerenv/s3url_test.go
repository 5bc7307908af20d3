package workerenv

import (
	"testing"

	"github.com/shoenig/test/must"
)

func TestParseS3URL(t *testing.T) {
	cases := []struct {
		in   string
		want S3Location
		err  string
	}{
		{in: "s3://my-bucket", want: S3Location{Bucket: "my-bucket"}},
		{in: "s3://my-bucket/", want: S3Location{Bucket: "my-bucket"}},
		{in: "s3://b.example/runs/team-a/", want: S3Location{Bucket: "b.example", Prefix: "runs/team-a"}},
		{in: "s3://abc/x", want: S3Location{Bucket: "abc", Prefix: "x"}},
		{in: "gs://bucket/x", err: "scheme is not s3"},
		{in: "/local/dir", err: "scheme is not s3"},
		{in: "s3://AKIA:secret@bucket/x", err: "credentials are not allowed"},
		{in: "s3://bucket/x?region=eu-west-1", err: "queries and fragments"},
		{in: "s3://bucket/x#frag", err: "queries and fragments"},
		{in: "s3://bucket/a//b", err: "empty, . or .. segment"},
		{in: "s3://bucket/a/../b", err: "empty, . or .. segment"},
		{in: "s3://ab/x", err: "3 to 63 characters"},
		{in: "s3://My-Bucket/x", err: "only a-z"},
		{in: "s3://-bucket/x", err: "start and end"},
		{in: "s3://a..b/x", err: "two dots"},
		{in: "s3://192.168.1.10/x", err: "IP address"},
		{in: "s3://bucket:9000/x", err: "only a-z"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseS3URL(tc.in)
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
			// The URL a location prints parses back to the same location.
			again, err := ParseS3URL(got.String())
			must.NoError(t, err)
			must.Eq(t, got, again)
		})
	}
}

func FuzzParseS3URL(f *testing.F) {
	for _, s := range []string{"s3://my-bucket", "s3://b.example/runs/team-a/", "s3://u:p@bucket/x",
		"s3://bucket/x?y=z", "s3://bucket/a//b", "s3://1.2.3.4/x", "file:///tmp", "s3://b%2Fx/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		loc, err := ParseS3URL(raw)
		if err != nil {
			return
		}
		if checkBucket(loc.Bucket) != nil {
			t.Fatalf("%q: accepted bad bucket %q", raw, loc.Bucket)
		}
		again, err := ParseS3URL(loc.String())
		if err != nil || again != loc {
			t.Fatalf("%q: %+v does not round-trip: %+v, %v", raw, loc, again, err)
		}
	})
}
