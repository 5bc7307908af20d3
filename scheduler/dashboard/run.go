package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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
	f          *follower
	ckpts      []Checkpoint
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
	s.stream(w, r, func(ctx context.Context) (any, error) {
		u, err := s.runUpdate(ctx, rw)
		if u == nil || err != nil {
			return nil, err
		}
		return u, nil
	})
}

func (s *Server) watchRun(ctx context.Context, key, job string) (*runWatch, error) {
	rw := &runWatch{jobID: job, first: true}
	if job != "" && s.nomad == nil {
		return nil, fmt.Errorf("%w: no Nomad address was given", errBadKey)
	}
	if job != "" {
		root, name, err := s.jobStorage(ctx, job)
		if err != nil {
			return nil, err
		}
		rw.root, rw.name = root, name
	} else {
		dir, err := s.localDir(key)
		if err != nil {
			return nil, err
		}
		rw.root, rw.name = filepath.Dir(dir), filepath.Base(dir)
	}
	if rw.root != "" {
		rw.f = newFollower(filepath.Join(rw.root, rw.name, storage.ProgressFile))
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
		recs, reset, err := rw.f.next()
		if err != nil {
			return nil, err
		}
		u.Reset = u.Reset || reset
		u.Records = pointsOf(recs)
		changed = changed || reset || len(recs) > 0
		if ck, moved := rw.checkpoints(recs, reset); moved || u.Name != "" {
			u.Checkpoints = &ck
			changed = true
		}
		fail, failed, err := storage.FailedForGood(rw.root, rw.name, "")
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

// checkpoints brings the list of checkpoints that exist up to date with
// the new records: a checkpoint exists while its directory does (as
// storage's readers judge it), and one deleted by retention never comes
// back, so only the last list and the new records are looked at (a few
// directories: the retained ones), never the whole history. moved reports
// a change.
func (rw *runWatch) checkpoints(recs []storage.Record, reset bool) (ck []Checkpoint, moved bool) {
	if reset {
		rw.ckpts, moved = nil, true
	}
	cands := rw.ckpts
	for _, r := range recs {
		if r.Checkpoint != "" {
			p := pointOf(r)
			cands = append(cands, Checkpoint{Name: r.Checkpoint, Step: p.Step, Time: p.Time, Metrics: p.Metrics, Generation: p.Generation})
		}
	}
	ck = make([]Checkpoint, 0, len(cands))
	for _, c := range cands {
		if fi, err := os.Lstat(filepath.Join(rw.root, rw.name, c.Name)); err == nil && fi.IsDir() {
			ck = append(ck, c)
		}
	}
	moved = moved || !reflect.DeepEqual(ck, rw.ckpts)
	rw.ckpts = ck
	return ck, moved
}
