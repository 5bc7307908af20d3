package objstore

import (
	"testing"

	"github.com/shoenig/test/must"
)

// ParseURL is workerenv.ParseS3URL (tested there), so the spec's checks
// and the stores agree.
func TestParseURLIsTheContracts(t *testing.T) {
	loc, err := ParseURL("s3://b.example/runs/team-a/")
	must.NoError(t, err)
	must.Eq(t, Location{Bucket: "b.example", Prefix: "runs/team-a"}, loc)
	_, err = ParseURL("s3://AKIA:secret@bucket/x")
	must.ErrorContains(t, err, "credentials are not allowed")
}
