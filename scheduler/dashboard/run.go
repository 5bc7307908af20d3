package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Point is one progress record as pages get it: the numbers of its
// metrics only (a curve has no use for the rest).
type Point struct {
	Step       int64              `json:"step"`
	Time       float64            `json:"time"` // Unix seconds
	Metrics    map[string]float64 `json:"metrics"`
	Checkpoint string             `json:"checkpoint,omitempty"`
	Generation uint64             `json:"generation"`
	Attempt    int                `json:"attempt"`
}

func pointOf(rec storage.Record) Point {
	p := Point{
		Step: rec.Step, Time: float64(rec.Time.UnixNano()) / 1e9, Metrics: map[string]float64{},
		Checkpoint: rec.Checkpoint, Generation: rec.Generation, Attempt: rec.Attempt,
	}
	for k := range rec.Metrics {
		if v, ok := storage.Score(rec, k); ok {
			p.Metrics[k] = v
		}
	}
	return p
}

func pointsOf(recs []storage.Record) []Point {
	out := make([]Point, len(recs))
	for i, r := range recs {
		out[i] = pointOf(r)
	}
	return out
}

// Checkpoint is one checkpoint that exists, with the metrics reported
// with it (its scores).
type Checkpoint struct {
	Name       string             `json:"name"`
	Step       int64              `json:"step"`
	Time       float64            `json:"time"`
	Metrics    map[string]float64 `json:"metrics"`
	Generation uint64             `json:"generation"`
}

// RunUpdate is one event of a run page's stream. Records are appended to
// what the page has, or replace it when Reset is set; the other fields
// are sent when they changed (Checkpoints and Workers whole).
type RunUpdate struct {
	Name        string           `json:"name,omitempty"`
	Reset       bool             `json:"reset,omitempty"`
	Records     []Point          `json:"records,omitempty"`
	Checkpoints *[]Checkpoint    `json:"checkpoints,omitempty"`
	Failure     *storage.Failure `json:"failure,omitempty"`
	Nomad       *NomadStatus     `json:"nomad,omitempty"`
}

// runWatch follows one run for one page.
type runWatch struct {
	root, name string // storage path and run name
	jobID      string // Nomad job, or ""
	f          *storage.Follower
	failed     bool
	nomadAt    time.Time
	nomad      *NomadStatus
	first      bool
}

// handleRunEvents streams a run: ?key= for a run under the storage path,
// ?job= for a nomad-train job on Nomad (its storage path read from the job).
func (s *Server) handleRunEvents(w http.ResponseWriter, r *http.Request) {
	rw, err := s.watchRun(r.Context(), r.URL.Query().Get("key"), r.URL.Query().Get("job"))
	if err != nil {
		httpError(w, err)
		return
	}
	if rw.f != nil {
		defer rw.f.Close()
	}
	s.stream(w, r, func(ctx context.Context) (any, error) {
		u, err := s.runUpdate(ctx, rw)
		if u == nil || err != nil {
			return nil, err
		}
		return u, nil
	})
}

// watchRun starts following a run; ctx bounds the follower's reads of an
// object store.
func (s *Server) watchRun(ctx context.Context, key, job string) (*runWatch, error) {
	rw := &runWatch{jobID: job, first: true}
	if job != "" && s.nomad == nil {
		return nil, fmt.Errorf("%w: no Nomad address was given", errBadKey)
	}
	var opts []storage.Option
	if job != "" {
		root, name, jobOpts, err := s.jobStorage(ctx, job)
		if err != nil {
			return nil, err
		}
		rw.root, rw.name, opts = root, name, jobOpts
	} else {
		root, name, err := s.runAt(key)
		if err != nil {
			return nil, err
		}
		rw.root, rw.name, opts = root, name, s.opts
	}
	if rw.root != "" {
		f, err := storage.Follow(ctx, rw.root, rw.name, opts...)
		if err != nil {
			return nil, fmt.Errorf("following run %s: %w", storage.RunLocation(rw.root, rw.name), err)
		}
		rw.f = f
	}
	return rw, nil
}

// runUpdate returns what changed since the last call, or nil.
func (s *Server) runUpdate(ctx context.Context, rw *runWatch) (*RunUpdate, error) {
	u := &RunUpdate{Reset: rw.first}
	if rw.first {
		u.Name = rw.name
	}
	changed := rw.first
	rw.first = false
	if rw.f != nil {
		got, err := rw.f.Next()
		if err != nil {
			return nil, err
		}
		u.Reset = u.Reset || got.Reset
		u.Records = pointsOf(got.Records)
		changed = changed || got.Reset || len(got.Records) > 0
		if got.CheckpointsChanged || u.Name != "" {
			ck := checkpointsOf(got.Checkpoints)
			u.Checkpoints = &ck
			changed = true
		}
		fail, failed, err := rw.f.Failed("")
		if err != nil {
			return nil, err
		}
		if failed && !rw.failed {
			u.Failure = &fail
			changed = true
		}
		rw.failed = failed
	}
	if rw.jobID != "" && s.nomad != nil && s.now().Sub(rw.nomadAt) >= nomadEvery {
		rw.nomadAt = s.now()
		st, err := s.nomadStatus(ctx, rw.jobID)
		if err != nil {
			return nil, err
		}
		if !reflect.DeepEqual(st, rw.nomad) {
			rw.nomad, u.Nomad = st, st
			changed = true
		}
	}
	if !changed {
		return nil, nil
	}
	return u, nil
}

// checkpointsOf turns the records of the checkpoints that exist (as
// storage judges them: a directory, or a manifest on an object store)
// into the page's list.
func checkpointsOf(recs []storage.Record) []Checkpoint {
	ck := make([]Checkpoint, 0, len(recs))
	for _, r := range recs {
		p := pointOf(r)
		ck = append(ck, Checkpoint{Name: r.Checkpoint, Step: p.Step, Time: p.Time, Metrics: p.Metrics, Generation: p.Generation})
	}
	return ck
}
