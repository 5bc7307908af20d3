package trainer

import (
	"encoding/json"
	"os"
	"sync"
	"time"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// eventLog appends milestone events to the file named by NOMAD_TRAIN_EVENTS,
// one JSON object per line, for the task driver (task events) and the local
// launcher (per-rank errors). A nil *eventLog or an empty path drops events.
type eventLog struct {
	mu sync.Mutex // guards f
	f  *os.File
}

func openEventLog(path string) *eventLog {
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil
	}
	return &eventLog{f: f}
}

func (l *eventLog) emit(kind, msg string, attrs map[string]string) {
	if l == nil {
		return
	}
	b, err := json.Marshal(workerenv.Event{Time: time.Now().UTC(), Kind: kind, Message: msg, Attrs: attrs})
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Write(append(b, '\n')) // one write: lines never interleave
}

func (l *eventLog) close() {
	if l != nil {
		l.f.Close()
	}
}
