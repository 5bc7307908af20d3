package trainer

import (
	"encoding/json"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/shoenig/test/must"
)

// series gathers m's registry: each series of the family name, by its
// label set ("rank=1,run=r"), as a gauge's value or a histogram's count.
func series(t *testing.T, m *workerMetrics, name string) map[string]float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	must.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			key := ""
			for _, l := range s.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + ","
			}
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(s.GetHistogram().GetSampleCount())
			case dto.MetricType_COUNTER:
				out[key] = s.GetCounter().GetValue()
			default:
				out[key] = s.GetGauge().GetValue()
			}
		}
	}
	return out
}

// A worker's series carry its current rank: a new generation that gives
// it another rank drops the old rank's series rather than leave them
// frozen beside the new ones; the same rank keeps its histograms.
func TestWorkerMetricsFollowRank(t *testing.T) {
	m := newWorkerMetrics("r")
	m.join(1, 1, 0)
	m.reportedStep(3, Metrics{"loss": 0.5, "acc": json.Number("0.75"), "done": true, "note": "text"})
	m.allReduceTook(time.Millisecond)
	must.Eq(t, map[string]float64{"name=acc,rank=1,run=r,": 0.75, "name=done,rank=1,run=r,": 1, "name=loss,rank=1,run=r,": 0.5},
		series(t, m, MetricReported)) // the string is no gauge
	must.Eq(t, map[string]float64{"rank=1,run=r,": 3}, series(t, m, MetricStep))

	m.join(1, 2, 1) // same rank: histograms keep counting
	m.allReduceTook(time.Millisecond)
	must.Eq(t, map[string]float64{"rank=1,run=r,": 2}, series(t, m, MetricAllReduceSeconds))
	must.Eq(t, map[string]float64{"rank=1,run=r,": 2}, series(t, m, MetricGeneration))
	must.Eq(t, map[string]float64{"rank=1,run=r,": 1}, series(t, m, MetricRestarts))

	m.join(0, 3, 2) // another rank: the old series go
	m.reportedStep(4, Metrics{"loss": 0.25})
	must.Eq(t, map[string]float64{"rank=0,run=r,": 4}, series(t, m, MetricStep))
	must.Eq(t, map[string]float64{"name=loss,rank=0,run=r,": 0.25}, series(t, m, MetricReported))
	must.Eq(t, map[string]float64{"rank=0,run=r,": 0}, series(t, m, MetricAllReduceSeconds))
	must.Eq(t, map[string]float64{"rank=0,run=r,": 1}, series(t, m, MetricStepsTotal)) // a new series: rate() takes it as a reset
}

// With metrics off every hook is a no-op on a nil *workerMetrics.
func TestWorkerMetricsOff(t *testing.T) {
	var m *workerMetrics
	m.join(0, 1, 0)
	m.reportedStep(1, Metrics{"loss": 1})
	m.allReduceTook(time.Second)
	m.committed(time.Second)
}
