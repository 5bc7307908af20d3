package dashboard

import (
	"context"
	"net/http"
	"path/filepath"
	"reflect"

	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Trial is one row of an experiment's trial table.
type Trial struct {
	ID         string               `json:"id"`
	Status     string               `json:"status"`
	Reason     string               `json:"reason,omitempty"`
	Config     map[string]any       `json:"config"`
	Params     map[string]any       `json:"params,omitempty"`
	Iterations int                  `json:"iterations"`
	Failures   int                  `json:"failures,omitempty"`
	Exploits   []tune.ExploitRecord `json:"exploits,omitempty"`
}

// TrialRecords are a trial's new progress records, as in RunUpdate.
type TrialRecords struct {
	Reset   bool    `json:"reset,omitempty"`
	Records []Point `json:"records,omitempty"`
}

// ExperimentUpdate is one event of an experiment page's stream: the
// trial table when it changed, and each trial's new records.
type ExperimentUpdate struct {
	Name    string                   `json:"name,omitempty"`
	Trials  []Trial                  `json:"trials,omitempty"`
	Records map[string]*TrialRecords `json:"records,omitempty"`
}

// expWatch follows one experiment for one page.
type expWatch struct {
	dir    string
	name   string
	trials []Trial
	follow map[string]*follower
}

// handleExperimentEvents streams the experiment ?key= names.
func (s *Server) handleExperimentEvents(w http.ResponseWriter, r *http.Request) {
	dir, err := s.localDir(r.URL.Query().Get("key"))
	if err == nil && !isExperiment(dir) {
		err = errBadKey
	}
	if err != nil {
		httpError(w, err)
		return
	}
	ew := &expWatch{dir: dir, follow: map[string]*follower{}}
	s.stream(w, r, func(context.Context) (any, error) {
		u, err := ew.update()
		if u == nil || err != nil {
			return nil, err
		}
		return u, nil
	})
}

// update returns what changed since the last call, or nil.
func (ew *expWatch) update() (*ExperimentUpdate, error) {
	st, ok, err := tune.LoadState(ew.dir)
	if err != nil || !ok {
		return nil, err
	}
	u := &ExperimentUpdate{Records: map[string]*TrialRecords{}}
	changed := false
	if ew.name != st.Name {
		ew.name, u.Name, changed = st.Name, st.Name, true
	}
	trials := make([]Trial, len(st.Trials))
	for i, t := range st.Trials {
		trials[i] = Trial{ID: t.ID, Status: t.Status, Reason: t.Reason, Config: t.Config, Params: t.Params,
			Iterations: t.Iterations, Failures: t.Failures, Exploits: t.Exploits}
		f := ew.follow[t.ID]
		if f == nil {
			f = newFollower(filepath.Join(ew.dir, t.ID, storage.ProgressFile))
			ew.follow[t.ID] = f
		}
		recs, reset, err := f.next()
		if err != nil {
			return nil, err
		}
		if reset || len(recs) > 0 {
			u.Records[t.ID] = &TrialRecords{Reset: reset, Records: pointsOf(recs)}
			changed = true
		}
	}
	if !reflect.DeepEqual(trials, ew.trials) {
		ew.trials, u.Trials, changed = trials, trials, true
	}
	if !changed {
		return nil, nil
	}
	return u, nil
}
