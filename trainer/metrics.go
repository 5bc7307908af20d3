package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Prometheus metrics a worker serves at workerenv.MetricsPath when
// workerenv.MetricsAddr is set. Every series carries the labels run (the
// run's name) and rank (this worker's rank in its current generation);
// reported metrics carry name as well, the metric's name as the training
// function reported it, unchanged (a label value needs no sanitizing, and
// one family keeps dashboards generic: nomad_train_metric{name="loss"}).
const (
	MetricStep             = "nomad_train_step"
	MetricStepsTotal       = "nomad_train_steps_total"
	MetricReported         = "nomad_train_metric"
	MetricAllReduceSeconds = "nomad_train_allreduce_seconds"
	MetricCommitSeconds    = "nomad_train_checkpoint_commit_seconds"
	MetricUploadWait       = "nomad_train_checkpoint_upload_wait_seconds"
	MetricStorageRetries   = "nomad_train_storage_retries_total"
	MetricGeneration       = "nomad_train_generation"
	MetricRestarts         = "nomad_train_restarts"
)

// workerMetrics holds one worker process's Prometheus metrics. A nil
// *workerMetrics (metrics off) takes every call and does nothing, so the
// hooks in the training path cost a nil check.
type workerMetrics struct {
	reg     *prometheus.Registry // ours
	runtime *prometheus.Registry // the Go runtime's and the process's
	// mu makes a report's gauges one snapshot: reportedStep sets them
	// under it, and a scrape reads ours under it (microseconds; the
	// runtime's are read outside it).
	mu sync.RWMutex

	step       *prometheus.GaugeVec
	steps      *prometheus.CounterVec
	reported   *prometheus.GaugeVec
	allReduce  *prometheus.HistogramVec
	commit     *prometheus.HistogramVec
	uploadWait *prometheus.HistogramVec
	retries    *prometheus.CounterVec
	generation *prometheus.GaugeVec
	restarts   *prometheus.GaugeVec

	// Set by join between generations, read by the training goroutine of
	// the generation that follows (the happens-before of starting it).
	rank       string
	stepG      prometheus.Gauge
	stepsC     prometheus.Counter
	allReduceH prometheus.Observer
	commitH    prometheus.Observer
	waitH      prometheus.Observer
	// retriesC (a prometheus.Counter) is read by a store's goroutines,
	// which outlive a generation.
	retriesC    atomic.Value
	reportedFor func(name string) prometheus.Gauge
}

// newWorkerMetrics registers a worker's metrics, labelled with run, and
// the Go runtime's and the process's own collectors.
func newWorkerMetrics(run string) *workerMetrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) prometheus.Collector { reg.MustRegister(c); return c }
	constant := prometheus.Labels{"run": run}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return f(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: constant},
			append([]string{"rank"}, labels...))).(*prometheus.GaugeVec)
	}
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return f(prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: constant, Buckets: buckets},
			[]string{"rank"})).(*prometheus.HistogramVec)
	}
	m := &workerMetrics{
		reg:      reg,
		step:     gauge(MetricStep, "The step of the latest report (Session.Report); it goes back when a generation restores an older checkpoint."),
		reported: gauge(MetricReported, "The latest value of each numeric metric the training function reported, by name.", "name"),
		steps: f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricStepsTotal, ConstLabels: constant,
			Help: "Reports (steps) this worker process made; rate() of it is the step rate."}, []string{"rank"})).(*prometheus.CounterVec),
		// 50µs (shared memory, small tensors) to about 30 s (the collective timeout).
		allReduce: hist(MetricAllReduceSeconds, "Time of each all-reduce, from call to return.", prometheus.ExponentialBuckets(50e-6, 2.5, 15)),
		// 1 ms to about 4 min: a rename on a local disk to a large upload.
		commit: hist(MetricCommitSeconds, "Time rank 0 took to commit each checkpoint (move every rank's files, fsync, rename, record).", prometheus.ExponentialBuckets(1e-3, 2.5, 14)),
		// 100µs (the upload had ended) to about 10 min (a big upload).
		uploadWait: hist(MetricUploadWait, "Time a report carrying a checkpoint waited for this rank's previous checkpoint upload to end (object storage, asynchronous uploads): what checkpointing costs a step beyond staging; 0 when it had ended.", prometheus.ExponentialBuckets(1e-4, 2.5, 18)),
		retries: f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricStorageRetries, ConstLabels: constant,
			Help: "Object store requests this worker retried (the server unreachable, restarting, answering 5xx or throttling, or silent past the stall timeout) and downloads it read on after they broke."}, []string{"rank"})).(*prometheus.CounterVec),
		generation: gauge(MetricGeneration, "The rendezvous generation this worker trains in (1 for the gang's first)."),
		restarts:   gauge(MetricRestarts, "Times the gang re-formed after losing a worker in this attempt at the run (failures counted against max_failures)."),
	}
	m.runtime = prometheus.NewRegistry()
	m.runtime.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Gather reads our metrics as one snapshot (see mu), then the runtime's.
func (m *workerMetrics) Gather() ([]*dto.MetricFamily, error) {
	m.mu.RLock()
	ours, err := m.reg.Gather()
	m.mu.RUnlock()
	if err != nil {
		return ours, err
	}
	rt, err := m.runtime.Gather()
	return append(ours, rt...), err
}

// join labels the metrics with the rank of a new generation (a rank that
// changed drops the old rank's series) and records the generation and the
// gang's restarts so far.
func (m *workerMetrics) join(rank int, generation uint64, restarts int) {
	if m == nil {
		return
	}
	r := strconv.Itoa(rank)
	if r != m.rank {
		for _, v := range []interface{ Reset() }{m.step, m.steps, m.reported, m.allReduce, m.commit, m.uploadWait, m.retries, m.generation, m.restarts} {
			v.Reset()
		}
		m.rank = r
		m.stepG = m.step.WithLabelValues(r)
		m.stepsC = m.steps.WithLabelValues(r)
		m.allReduceH = m.allReduce.WithLabelValues(r)
		m.commitH = m.commit.WithLabelValues(r)
		m.waitH = m.uploadWait.WithLabelValues(r)
		m.retriesC.Store(m.retries.WithLabelValues(r))
		m.reportedFor = func(name string) prometheus.Gauge { return m.reported.WithLabelValues(r, name) }
	}
	m.generation.WithLabelValues(r).Set(float64(generation))
	m.restarts.WithLabelValues(r).Set(float64(restarts))
}

// reportedStep records a report: its step and every numeric metric in it.
func (m *workerMetrics) reportedStep(step int64, metrics Metrics) {
	if m == nil || m.stepG == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stepG.Set(float64(step))
	m.stepsC.Inc()
	for name, v := range metrics {
		if f, ok := numeric(v); ok {
			m.reportedFor(name).Set(f)
		}
	}
}

// allReduceTook and committed observe one all-reduce and one checkpoint
// commit.
func (m *workerMetrics) allReduceTook(d time.Duration) {
	if m != nil && m.allReduceH != nil {
		m.allReduceH.Observe(d.Seconds())
	}
}

func (m *workerMetrics) committed(d time.Duration) {
	if m != nil && m.commitH != nil {
		m.commitH.Observe(d.Seconds())
	}
}

// uploadWaited observes a report's wait for the previous upload.
func (m *workerMetrics) uploadWaited(d time.Duration) {
	if m != nil && m.waitH != nil {
		m.waitH.Observe(d.Seconds())
	}
}

// storageRetried counts an object store request retried, or a download
// read on. It is called from the store's goroutines.
func (m *workerMetrics) storageRetried() {
	if m == nil {
		return
	}
	if c, ok := m.retriesC.Load().(prometheus.Counter); ok {
		c.Inc()
	}
}

// numeric is v as a float64 when it is a number (or a bool, as 0 or 1).
func numeric(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case int32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// metricsServer serves a registry at workerenv.MetricsPath.
type metricsServer struct {
	srv  *http.Server
	addr string // where it listens
	done chan struct{}
}

// serveMetrics serves m at addr until close. The listener is bound before
// it returns, so the address it reports can be scraped at once.
func serveMetrics(addr string, m *workerMetrics, log hclog.Logger) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(workerenv.MetricsPath, promhttp.HandlerFor(m, promhttp.HandlerOpts{
		ErrorLog: log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}))
	s := &metricsServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		addr: ln.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server stopped", "error", err)
		}
	}()
	return s, nil
}

// close stops the server, letting a scrape in flight finish for a moment.
func (s *metricsServer) close() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx) // on timeout Serve still returns: the listener is closed
	<-s.done
}

// startMetrics serves a worker's metrics when env asks for them. A port
// that cannot be bound costs the metrics, not the run: it is logged and
// told as an event, and training goes on without them.
func startMetrics(env workerenv.Env, ev *eventLog, log hclog.Logger) (*workerMetrics, *metricsServer) {
	if env.MetricsAddr == "" {
		return nil, nil
	}
	m := newWorkerMetrics(env.RunName)
	srv, err := serveMetrics(env.MetricsAddr, m, log)
	if err != nil {
		log.Warn("serving no metrics", "error", err)
		ev.emit("metrics_unavailable", err.Error(), nil)
		return nil, nil
	}
	ev.emit("metrics_serving", "http://"+srv.addr+workerenv.MetricsPath, map[string]string{"addr": srv.addr})
	return m, srv
}
