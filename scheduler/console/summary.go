package console

import (
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Summary is what `run` and `tune` print when they end: how long, how
// fast, what failed, the best checkpoint, and the command that opens the
// curves.
type Summary struct {
	// Kind is "run" or "experiment"; Name its name.
	Kind, Name string
	Wall       time.Duration
	// Steps are the reports made during Wall (every trial's, for an
	// experiment); Unit names them ("steps", "trial reports").
	Steps int64
	Unit  string
	// Restarts are workers replaced after a failure or a stop; Failures
	// those that counted against the failure budget MaxFailures (-1:
	// unlimited). Trials, for an experiment: how many and how many failed.
	Restarts, Failures, MaxFailures int
	Trials, FailedTrials            int
	// Best is the best checkpoint's directory and Score how it scored
	// ("loss=0.0135"); "" when there is none.
	Best, Score string
	// StartedFrom is the checkpoint the run started from, when it started
	// from another run's ("<location> (step 20)").
	StartedFrom string
	// Storage is the storage path the dashboard reads; "" leaves the
	// curves line out. StorageOptions are an s3:// path's non-secret
	// options (the spec's storage block), which the command passes on.
	Storage        string
	StorageOptions workerenv.StorageOptions
}

// Render writes the summary as an indented block under a heading.
func (s Summary) Render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "==> summary of %s %q\n", s.Kind, s.Name)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "    wall time\t%s\n", s.Wall.Round(100*time.Millisecond))
	unit := s.Unit
	if unit == "" {
		unit = "steps"
	}
	if secs := s.Wall.Seconds(); secs > 0 {
		fmt.Fprintf(tw, "    %s\t%d (%s/s)\n", unit, s.Steps, rate(float64(s.Steps)/secs))
	} else {
		fmt.Fprintf(tw, "    %s\t%d\n", unit, s.Steps)
	}
	if s.Kind == "experiment" {
		fmt.Fprintf(tw, "    trials\t%d (%d failed)\n", s.Trials, s.FailedTrials)
	} else {
		budget := "unlimited"
		if s.MaxFailures >= 0 {
			budget = fmt.Sprint(s.MaxFailures)
		}
		fmt.Fprintf(tw, "    restarts\t%d (failures used: %d of %s)\n", s.Restarts, s.Failures, budget)
	}
	if s.StartedFrom != "" {
		fmt.Fprintf(tw, "    started from\t%s\n", s.StartedFrom)
	}
	if s.Best != "" {
		best := s.Best
		if s.Score != "" {
			best += " (" + s.Score + ")"
		}
		fmt.Fprintf(tw, "    best checkpoint\t%s\n", best)
	}
	if s.Storage != "" {
		fmt.Fprintf(tw, "    curves\t%s\n", s.dashboard())
	}
	tw.Flush()
	return b.String()
}

// dashboard is the command that serves the curves, and the page to open.
func (s Summary) dashboard() string {
	page := "run"
	if s.Kind == "experiment" {
		page = "exp"
	}
	var flags strings.Builder
	if o := s.StorageOptions; o.Endpoint != "" {
		fmt.Fprintf(&flags, "-s3-endpoint %s ", shellQuote(o.Endpoint))
	}
	if o := s.StorageOptions; o.Region != "" {
		fmt.Fprintf(&flags, "-s3-region %s ", shellQuote(o.Region))
	}
	if s.StorageOptions.PathStyle {
		flags.WriteString("-s3-path-style ")
	}
	return fmt.Sprintf("nomad-train dashboard %s%s, then http://127.0.0.1:8265/#/%s?key=%s",
		flags.String(), shellQuote(s.Storage), page, url.QueryEscape(s.Name))
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
