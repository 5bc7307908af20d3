package nomad

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// recording is a recorded sequence of a job's allocation and evaluation
// lists, each exactly the body of GET /v1/job/<id>/allocations and
// /v1/job/<id>/evaluations at one moment.
type recording struct {
	Description string
	Job         string
	Steps       []struct {
		Allocations []*api.AllocationListStub
		Evaluations []*api.Evaluation
	}
}

func loadRecording(t *testing.T, name string) recording {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	must.NoError(t, err)
	var r recording
	must.NoError(t, json.Unmarshal(b, &r))
	must.SliceNotEmpty(t, r.Steps)
	return r
}
