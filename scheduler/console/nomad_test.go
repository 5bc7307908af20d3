package console

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
)

// Failures are listed in time order, and one that reaches the follower late
// can sort before those already printed: each is printed once all the same.
func TestStatusPrinterPrintsEachFailureOnce(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1796205600+int64(s), 0).UTC() }
	a := nomad.Failure{Rank: 3, AllocID: "aaaaaaaa-1", Time: at(2), Reason: "driver failure"}
	b := nomad.Failure{Rank: 2, AllocID: "bbbbbbbb-1", Time: at(1), Reason: "driver failure"}
	c := nomad.Failure{Rank: 1, AllocID: "cccccccc-1", Time: at(3), Reason: "driver failure"}
	var out bytes.Buffer
	p := &StatusPrinter{W: &out, Count: 4}
	p.Print(nomad.Status{Phase: nomad.PhaseRunning, Failures: []nomad.Failure{a}})
	p.Print(nomad.Status{Phase: nomad.PhaseRunning, Failures: []nomad.Failure{b, a, c}})
	for _, f := range []nomad.Failure{a, b, c} {
		must.Eq(t, 1, strings.Count(out.String(), "worker failed: "+f.String()+"\n"), must.Sprint(out.String()))
	}
}

// A pending gang says what it waits for; a running one does not.
func TestStatusPrinterSaysWhatItWaitsFor(t *testing.T) {
	var out bytes.Buffer
	p := &StatusPrinter{W: &out, Count: 2}
	p.Print(nomad.Status{Phase: nomad.PhasePending})
	p.Print(nomad.Status{Phase: nomad.PhaseRunning})
	must.Eq(t, "    pending: 0/2 workers placed, 0 running; waiting for placement and the workers' start (image or artifact downloads included)\n"+
		"    running: 0/2 workers placed, 0 running\n", out.String())
}
