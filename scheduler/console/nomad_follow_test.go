package console

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/trainspec"
)

// syncBuffer is a bytes.Buffer safe for the follower's goroutines.
type syncBuffer struct {
	syncWriter
	b bytes.Buffer
}

func newSyncBuffer() *syncBuffer {
	s := &syncBuffer{}
	s.syncWriter.w = &s.b
	return s
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// On a terminal, a run followed on Nomad shows the bar too: what it waits
// for while Nomad places the gang, then its reports' progress; the bar is
// gone before the summary.
func TestFollowNomadShowsABar(t *testing.T) {
	t.Setenv("CONSUL_HTTP_ADDR", "")
	srv := nomadtest.New(t)
	rec, err := nomadtest.LoadRecording(filepath.Join("..", "nomad", "testdata", "gang-complete.json"))
	must.NoError(t, err)
	srv.Script("fakerun", rec.Steps)
	storage := t.TempDir()
	spec, diags := trainspec.Parse([]byte(fmt.Sprintf(`train "fakerun" {
  entrypoint { builtin = "quickstart" }
  config = { epochs = 10 }
  scaling { num_workers = 2 }
  run { storage_path = %q }
}
`, storage)), "train.hcl", trainspec.ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	job, diags := trainspec.Compile(spec)
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	// The workers' report, made after the run started.
	must.NoError(t, os.MkdirAll(filepath.Join(storage, "fakerun"), 0o755))
	line := fmt.Sprintf(`{"step":3,"time":%q,"metrics":{"epoch":2,"loss":0.25},"generation":1,"attempt":0}`,
		time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano))
	must.NoError(t, os.WriteFile(filepath.Join(storage, "fakerun", "progress.jsonl"), []byte(line+"\n"), 0o644))

	c, err := (&nomad.Flags{Address: srv.URL}).Client()
	must.NoError(t, err)
	out, errs := newSyncBuffer(), newSyncBuffer()
	live := NewLive(out, func() (int, int) { return 80, 24 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := FollowNomad(ctx, c, spec, job, NomadRun{Address: srv.URL, Settle: time.Millisecond,
		ProgressEvery: time.Millisecond, Live: live}, out, errs)
	text := out.String()
	must.Eq(t, 0, code, must.Sprint(text, errs.String()))
	// The first draw comes before the first status: the job is being
	// submitted. Then each status says what the run waits for until the
	// report moves the bar (TestWaitingOnNomad: the reports and the
	// statuses are read concurrently); the stop clears it.
	must.StrContains(t, text, "submitting the job (0:00)")
	must.StrContains(t, text, "    step 3 epoch 2 loss=0.25 (generation 1, attempt 0)\n")
	bars := regexp.MustCompile(`epoch 3/10 \[=+>? *\]  30%  0:\d\d  loss=0.25`).FindAllString(text, -1)
	must.SliceNotEmpty(t, bars, must.Sprint(text))
	i := strings.Index(text, "==> summary of run")
	must.Positive(t, i, must.Sprint(text))
	must.StrNotContains(t, text[i:], "\x1b[")
	j := strings.Index(text, "==> last report")
	must.Positive(t, j, must.Sprint(text))
	must.StrHasSuffix(t, "\r\x1b[J", text[:j], must.Sprint(text))
}

func TestWaitingOnNomad(t *testing.T) {
	running := nomad.Worker{ClientStatus: "running"}
	pending := nomad.Worker{ClientStatus: "pending"}
	cases := []struct {
		name string
		st   nomad.Status
		want string
	}{
		{"blocked", nomad.Status{Phase: nomad.PhaseBlocked, Unplaced: 2}, "waiting for capacity: 2 workers not placed"},
		{"placing", nomad.Status{Phase: nomad.PhasePending, Workers: []nomad.Worker{running, pending}},
			"waiting for placement and start: 1 of 2 workers running"},
		{"all running", nomad.Status{Phase: nomad.PhaseRunning, Workers: []nomad.Worker{running, running}},
			"waiting for 2 workers to rendezvous and report"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			must.Eq(t, c.want, waitingOnNomad(c.st, 2))
		})
	}
}
