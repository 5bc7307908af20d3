package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

//go:embed assets
var assets embed.FS

// DefaultInterval is how often an open page is brought up to date.
const DefaultInterval = time.Second

// Options configure a Server.
type Options struct {
	// Root is a storage path (its runs and experiments are listed): a
	// directory or an object store (s3://bucket/prefix); or one run's own
	// path (its storage path is shown); or one experiment's directory. It
	// may be empty when Nomad is given.
	Root string
	// Storage are an s3:// Root's non-secret options (endpoint, region,
	// path style); credentials come the standard AWS way.
	Storage workerenv.StorageOptions
	// Nomad lists the nomad-train jobs and their workers; nil for none.
	Nomad nomad.API
	// Logger defaults to a null logger.
	Logger hclog.Logger
	// Interval is how often open pages are updated (DefaultInterval).
	Interval time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Server serves the dashboard. Its handler is safe for concurrent use.
type Server struct {
	ctx      context.Context  // bounds the reads that outlive a request (the runs list's)
	root     string           // Options.Root's storage path (a directory or an s3:// location), or ""
	remote   bool             // root is on an object store
	opts     []storage.Option // the object store's options
	nomad    nomad.API
	log      hclog.Logger
	interval time.Duration
	now      func() time.Time

	mu        sync.Mutex // guards summaries
	summaries map[string]*summarizer
}

// New checks the options and returns a Server. ctx bounds New's look at
// the storage path and, for the server's life, its reads of the runs it
// lists.
func New(ctx context.Context, o Options) (*Server, error) {
	s := &Server{ctx: ctx, nomad: o.Nomad, log: o.Logger, interval: o.Interval, now: o.Now, summaries: map[string]*summarizer{}}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	s.log = s.log.Named("dashboard")
	if s.interval <= 0 {
		s.interval = DefaultInterval
	}
	if s.now == nil {
		s.now = time.Now
	}
	if o.Root == "" && o.Nomad == nil {
		return nil, errors.New("dashboard: give a storage path, a Nomad address or both")
	}
	if o.Root != "" {
		if err := s.setRoot(ctx, o.Root, o.Storage); err != nil {
			return nil, fmt.Errorf("dashboard: %w", err)
		}
	}
	return s, nil
}

// Handler returns the dashboard's HTTP handler: the page at /, its assets,
// and the JSON and event-stream API under /api/.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.HandleFunc("GET /api/runs", s.handleRuns)
	mux.HandleFunc("GET /api/run/events", s.handleRunEvents)
	mux.HandleFunc("GET /api/experiment/events", s.handleExperimentEvents)
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

func httpError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	if errors.Is(err, errBadKey) || errors.Is(err, nomad.ErrNoSuchRun) {
		code = http.StatusNotFound
	}
	http.Error(w, err.Error(), code)
}

// stream serves server-sent events: every interval it calls next, and
// sends what it returns unless that is nil. It returns when the client
// goes away or next fails (the error is sent as an "error" event first).
func (s *Server) stream(w http.ResponseWriter, r *http.Request, next func(ctx context.Context) (any, error)) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	ctx := r.Context()
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		ev, err := next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(w, "event: error\ndata: %s\n\n", strings.ReplaceAll(err.Error(), "\n", " "))
				flusher.Flush()
			}
			return
		}
		if ev != nil {
			b, err := json.Marshal(ev)
			if err != nil {
				s.log.Error("encoding an update", "error", err)
				return
			}
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
				return
			}
			flusher.Flush()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
