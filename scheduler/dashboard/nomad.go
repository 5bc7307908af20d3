package dashboard

import (
	"context"
	"fmt"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// nomadEvery is how often a run page asks Nomad about the run's workers:
// less often than files are looked at, to spare the servers.
const nomadEvery = 5 * time.Second

// NomadStatus is a nomad-train job's state as Nomad sees it.
type NomadStatus struct {
	JobID    string         `json:"job_id"`
	Phase    string         `json:"phase"`
	Restarts int            `json:"restarts"`
	Workers  []nomad.Worker `json:"workers"`
	Failures []string       `json:"failures,omitempty"`
	Reason   string         `json:"reason,omitempty"`
}

// nomadStatus reads a job's workers, as `nomad-train status` shows them.
func (s *Server) nomadStatus(ctx context.Context, jobID string) (*NomadStatus, error) {
	job, err := s.nomad.JobInfo(ctx, jobID)
	if err != nil {
		return nil, fmt.Errorf("reading run %q: %w", jobID, err)
	}
	count := 0
	for _, g := range job.TaskGroups {
		if g.Name != nil && *g.Name == trainspec.WorkerGroup && g.Count != nil {
			count = *g.Count
		}
	}
	snap, err := nomad.ReadSnapshot(ctx, s.nomad, jobID)
	if err != nil {
		return nil, err
	}
	t := nomad.NewTracker(trainspec.WorkerGroup, count, true)
	if job.JobModifyIndex != nil { // the latest submission's workers only
		t.Since(*job.JobModifyIndex)
	}
	t.Observe(snap)
	st := t.Status()
	out := &NomadStatus{JobID: jobID, Phase: string(st.Phase), Restarts: st.Restarts(), Workers: st.Workers, Reason: st.Reason}
	for _, f := range st.Failures {
		out.Failures = append(out.Failures, f.String())
	}
	return out, nil
}

// jobStorage returns where a nomad-train job keeps its run: the storage
// path and run name from its meta, and the store's options from its
// workers' settings; root is "" when the path is neither an object store
// nor a local directory (its curves are then not shown).
func (s *Server) jobStorage(ctx context.Context, jobID string) (root, name string, opts []storage.Option, err error) {
	job, err := s.nomad.JobInfo(ctx, jobID)
	if err != nil {
		return "", "", nil, fmt.Errorf("reading run %q: %w", jobID, err)
	}
	name, ok := job.Meta[trainspec.MetaRun]
	if !ok {
		return "", "", nil, fmt.Errorf("%w: job %q is not a nomad-train run", nomad.ErrNoSuchRun, jobID)
	}
	sp := job.Meta[trainspec.MetaStoragePath]
	if storage.IsObjectPath(sp) {
		return sp, name, []storage.Option{storage.WithStorageOptions(trainspec.StorageOptionsOf(job))}, nil
	}
	root, err = storage.LocalDir(sp)
	if err != nil {
		return "", name, nil, nil
	}
	return root, name, nil, nil
}
