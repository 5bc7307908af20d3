package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// idleAfter is how long after its last report a local run is shown idle
// rather than running: nothing but its records tells.
const idleAfter = time.Minute

// RunSummary is one line of the runs page.
type RunSummary struct {
	// Kind is "run" (local), "experiment" or "nomad".
	Kind string `json:"kind"`
	// Key names a local run or experiment under the storage path; JobID
	// a Nomad job.
	Key   string `json:"key,omitempty"`
	JobID string `json:"job_id,omitempty"`
	Name  string `json:"name"`
	// State is running, idle or failed for a local run; the count of
	// trials by status for an experiment; Nomad's word for a job.
	State    string             `json:"state"`
	Step     int64              `json:"step"`
	Records  int                `json:"records"`
	Metrics  map[string]float64 `json:"metrics,omitempty"`
	Restarts int                `json:"restarts"`
	Updated  float64            `json:"updated,omitempty"` // Unix seconds of the last report
	Error    string             `json:"error,omitempty"`
}

// summarizer folds a run's records into its summary as they come.
type summarizer struct {
	f   *storage.Follower
	sum RunSummary
	gen uint64 // generation and attempt of the last record
	att int
}

func (z *summarizer) update() error {
	got, err := z.f.Next()
	if err != nil {
		return err
	}
	recs, reset := got.Records, got.Reset
	if reset {
		z.sum.Records, z.sum.Restarts, z.sum.Step, z.sum.Metrics, z.sum.Updated = 0, 0, 0, nil, 0
	}
	for _, r := range recs {
		if z.sum.Records > 0 && (r.Generation != z.gen || r.Attempt != z.att) {
			z.sum.Restarts++
		}
		z.gen, z.att = r.Generation, r.Attempt
		p := pointOf(r)
		z.sum.Records++
		z.sum.Step, z.sum.Metrics, z.sum.Updated = p.Step, p.Metrics, p.Time
	}
	return nil
}

// handleRuns lists the local runs and experiments and the Nomad jobs.
func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request) {
	runs, err := s.listRuns(r.Context())
	if err != nil {
		httpError(w, err)
		return
	}
	writeJSON(w, runs)
}

func (s *Server) listRuns(ctx context.Context) ([]RunSummary, error) {
	var out []RunSummary
	if s.root != "" {
		local, err := s.listStorage(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, local...)
	}
	if s.nomad != nil {
		jobs, err := nomad.ListRuns(ctx, s.nomad)
		if err != nil {
			out = append(out, RunSummary{Kind: "nomad", Name: "(Nomad)", Error: err.Error()})
		}
		for _, j := range jobs {
			out = append(out, RunSummary{Kind: "nomad", JobID: j.JobID, Name: j.Name, State: j.Status})
		}
	}
	return out, nil
}

// listStorage lists the runs (through storage: on a directory or an
// object store) and the experiments (directories with an experiment
// state) in the storage path, or the storage path itself when it is an
// experiment.
func (s *Server) listStorage(ctx context.Context) ([]RunSummary, error) {
	if s.isExperiment(ctx, s.root) {
		return []RunSummary{s.experimentSummary(ctx, ".", s.root)}, nil
	}
	runs, err := storage.ListRuns(ctx, s.root, s.opts...)
	if err != nil {
		return nil, err
	}
	var out []RunSummary
	for _, name := range runs {
		out = append(out, s.runSummary(name))
	}
	s.forgetRunsBut(runs)
	exps, err := storage.ListExperiments(ctx, s.root, s.opts...)
	if err != nil {
		return nil, err
	}
	for _, name := range exps {
		out = append(out, s.experimentSummary(ctx, name, storage.RunLocation(s.root, name)))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Updated > out[j].Updated })
	return out, nil
}

// forgetRunsBut closes the followers of the runs not in keep: runs that
// left the storage path (moved aside, deleted) hold nothing open.
func (s *Server) forgetRunsBut(keep []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, z := range s.summaries {
		if !slices.Contains(keep, key) {
			if err := z.f.Close(); err != nil {
				s.log.Debug("closing a run's follower", "run", key, "error", err)
			}
			delete(s.summaries, key)
		}
	}
}

// runSummary brings the summary of the run named key up to date. Its
// follower outlives the request: it is bounded by the server's context.
func (s *Server) runSummary(key string) RunSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	z := s.summaries[key]
	if z == nil {
		f, err := storage.Follow(s.ctx, s.root, key, s.opts...)
		if err != nil {
			return RunSummary{Kind: "run", Key: key, Name: key, Error: err.Error()}
		}
		z = &summarizer{f: f, sum: RunSummary{Kind: "run", Key: key, Name: key}}
		s.summaries[key] = z
	}
	sum := z.sum
	sum.Error = ""
	if err := z.update(); err != nil {
		sum.Error = err.Error()
	} else {
		sum = z.sum
	}
	// A run launched from this machine says how it stands (running,
	// complete, failed, stopped, lost with its launcher); for another the
	// state is guessed from its reports.
	if st, err := launch.ReadState(launch.RunDir(s.root, key)); err == nil && st.Phase != "" {
		sum.State = st.Phase
		return sum
	}
	sum.State = "running"
	if s.now().Sub(time.Unix(0, int64(sum.Updated*1e9))) > idleAfter {
		sum.State = "idle"
	}
	if _, failed, err := z.f.Failed(""); err == nil && failed {
		sum.State = "failed"
	}
	return sum
}

// experimentSummary counts an experiment's trials by status.
func (s *Server) experimentSummary(ctx context.Context, key, where string) RunSummary {
	sum := RunSummary{Kind: "experiment", Key: key, Name: path.Base(filepath.ToSlash(where))}
	st, ok, err := tune.LoadState(ctx, where, s.opts...)
	if err != nil {
		sum.Error = err.Error()
		return sum
	}
	if !ok {
		return sum
	}
	sum.Name = st.Name
	counts := map[string]int{}
	for _, t := range st.Trials {
		counts[t.Status]++
		sum.Restarts += t.Failures
		sum.Records += t.Iterations
	}
	var parts []string
	for _, k := range []string{tune.StatusRunning, tune.StatusPending, tune.StatusTerminated, tune.StatusStopped, tune.StatusError} {
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], strings.ToLower(k)))
		}
	}
	sum.State = strings.Join(parts, ", ")
	sum.Updated = float64(st.Written.UnixNano()) / 1e9
	return sum
}
