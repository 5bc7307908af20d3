package dashboard

import (
	"context"
	"fmt"
	"net/http"
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
	TimeTotal  float64              `json:"time_total_s,omitempty"` // seconds trained at the latest report
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
	Name string `json:"name,omitempty"`
	// Metric and Mode are the experiment's own, which the page ranks the
	// trials by until the user picks another.
	Metric  string                   `json:"metric,omitempty"`
	Mode    string                   `json:"mode,omitempty"`
	Trials  []Trial                  `json:"trials,omitempty"`
	Records map[string]*TrialRecords `json:"records,omitempty"`
}

// expWatch follows one experiment for one page: its state in its place,
// each trial's run where the state says the tuner keeps it.
type expWatch struct {
	where string
	opts  []storage.Option // the object store's, for the state

	name, metric, mode string
	trials             []Trial
	follow             map[string]*storage.Follower
}

// handleExperimentEvents streams the experiment ?key= names.
func (s *Server) handleExperimentEvents(w http.ResponseWriter, r *http.Request) {
	where, err := s.experimentAt(r.Context(), r.URL.Query().Get("key"))
	if err != nil {
		httpError(w, err)
		return
	}
	ew := &expWatch{where: where, opts: s.opts, follow: map[string]*storage.Follower{}}
	defer ew.close()
	s.stream(w, r, func(ctx context.Context) (any, error) {
		u, err := ew.update(ctx)
		if u == nil || err != nil {
			return nil, err
		}
		return u, nil
	})
}

// update returns what changed since the last call, or nil. ctx bounds
// the trials' followers for their whole life.
func (ew *expWatch) update(ctx context.Context) (*ExperimentUpdate, error) {
	st, ok, err := tune.LoadState(ctx, ew.where, ew.opts...)
	if err != nil || !ok {
		return nil, err
	}
	root, opts := st.TrialRuns(ew.where)
	u := &ExperimentUpdate{Records: map[string]*TrialRecords{}}
	changed := false
	if ew.name != st.Name {
		ew.name, u.Name, changed = st.Name, st.Name, true
	}
	if ew.metric != st.Metric || ew.mode != st.Mode {
		ew.metric, ew.mode, u.Metric, u.Mode, changed = st.Metric, st.Mode, st.Metric, st.Mode, true
	}
	trials := make([]Trial, len(st.Trials))
	for i, t := range st.Trials {
		trials[i] = Trial{ID: t.ID, Status: t.Status, Reason: t.Reason, Config: t.Config, Params: t.ParamsNow(),
			Iterations: t.Iterations, TimeTotal: t.TimeTotal, Failures: t.Failures, Exploits: t.Exploits}
		f := ew.follow[t.ID]
		if f == nil {
			if f, err = storage.Follow(ctx, root, t.ID, opts...); err != nil {
				return nil, fmt.Errorf("following trial %s: %w", t.ID, err)
			}
			ew.follow[t.ID] = f
		}
		got, err := f.Next()
		if err != nil {
			return nil, err
		}
		if got.Reset || len(got.Records) > 0 {
			u.Records[t.ID] = &TrialRecords{Reset: got.Reset, Records: pointsOf(got.Records)}
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

// close releases the trials' followers.
func (ew *expWatch) close() {
	for _, f := range ew.follow {
		f.Close()
	}
}
