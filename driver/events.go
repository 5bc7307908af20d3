package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nomad-train/nomad-train/driver/executor"
	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// eventHub fans driver task events out to every TaskEvents stream. A slow
// stream loses events rather than stalling the tasks (Nomad's events are
// informational).
type eventHub struct {
	logger hclog.Logger

	mu sync.Mutex
	// Guarded by mu.
	subs map[chan *drivers.DriverTaskEvent]struct{}
}

func newEventHub(logger hclog.Logger) *eventHub {
	return &eventHub{logger: logger, subs: map[chan *drivers.DriverTaskEvent]struct{}{}}
}

// subscribe returns a channel of events and a function that ends the
// subscription.
func (h *eventHub) subscribe() (<-chan *drivers.DriverTaskEvent, func()) {
	ch := make(chan *drivers.DriverTaskEvent, 256)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

func (h *eventHub) publish(ev *drivers.DriverTaskEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
			h.logger.Warn("task event dropped: stream is slow", "task_id", ev.GetTaskId(), "message", ev.GetMessage())
		}
	}
}

// maxEventLine bounds one line of the events file; a longer one is skipped.
const maxEventLine = 64 << 10

// splitEvents parses the complete lines at the start of buf. It returns the
// events, the number of bytes consumed and the lines it could not parse.
// A trailing line without a newline is left for the next read.
func splitEvents(buf []byte) (evs []workerenv.Event, consumed int, bad []string) {
	for {
		i := bytes.IndexByte(buf[consumed:], '\n')
		if i < 0 {
			if len(buf)-consumed > maxEventLine {
				bad = append(bad, "line too long")
				consumed = len(buf)
			}
			return evs, consumed, bad
		}
		line := bytes.TrimSpace(buf[consumed : consumed+i])
		consumed += i + 1
		if len(line) == 0 {
			continue
		}
		var ev workerenv.Event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Kind == "" {
			bad = append(bad, string(line))
			continue
		}
		evs = append(evs, ev)
	}
}

// toDriverEvent turns a runtime event into Nomad's task event: the message
// is the event's message (or its kind), the annotations its attributes plus
// "kind".
func toDriverEvent(tc *drivers.TaskConfig, ev workerenv.Event, now time.Time) *drivers.DriverTaskEvent {
	ann := make(map[string]string, len(ev.Attrs)+1)
	for k, v := range ev.Attrs {
		ann[k] = v
	}
	ann["kind"] = ev.Kind
	msg := ev.Message
	if msg == "" {
		msg = ev.Kind
	}
	at := ev.Time
	if at.IsZero() {
		at = now
	}
	return &drivers.DriverTaskEvent{
		TaskId:      tc.GetId(),
		AllocId:     tc.GetAllocId(),
		TaskName:    tc.GetName(),
		Timestamp:   timestamppb.New(at),
		Message:     msg,
		Annotations: ann,
	}
}

// eventTailer follows one task's events file.
type eventTailer struct {
	path string
	// owner, when ownerKnown, is the uid the file must belong to: the
	// task's user, as whom its worker writes it.
	owner      int
	ownerKnown bool
	offset     int64
	interval   time.Duration
	publish    func(workerenv.Event)
	logger     hclog.Logger
	buf        []byte
	// coalesce, when set, thins checkpoint events; now is its clock.
	coalesce *eventCoalescer
	now      func() time.Time
	lastErr  string // the error of the last poll, logged once
}

// fromEnd starts the tailer at the current end of the file, so a recovered
// task does not replay what was already published.
func (t *eventTailer) fromEnd() {
	if fi, err := os.Stat(t.path); err == nil {
		t.offset = fi.Size()
	}
}

// run polls the file until ctx ends; after done closes it reads once more
// (the runtime's last events come just before it exits) and returns.
func (t *eventTailer) run(ctx context.Context, done <-chan struct{}) {
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			t.flush()
			return
		case <-done:
			t.poll()
			t.flush()
			return
		case <-tick.C:
			t.poll()
			if t.coalesce != nil {
				t.publishAll(t.coalesce.due(t.now()))
			}
		}
	}
}

// emit passes one event from the file on, through the coalescer if any.
func (t *eventTailer) emit(ev workerenv.Event) {
	if t.coalesce == nil {
		t.publish(ev)
		return
	}
	t.publishAll(t.coalesce.offer(ev, t.now()))
}

// flush publishes what the coalescer still holds: the task is over.
func (t *eventTailer) flush() {
	if t.coalesce != nil {
		t.publishAll(t.coalesce.flush(t.now()))
	}
}

func (t *eventTailer) publishAll(evs []workerenv.Event) {
	for _, ev := range evs {
		t.publish(ev)
	}
}

func (t *eventTailer) poll() {
	err := t.readNew()
	if err != nil && err.Error() != t.lastErr {
		t.logger.Warn("read events file", "path", t.path, "error", err)
	}
	t.lastErr = ""
	if err != nil {
		t.lastErr = err.Error() // the same error at every poll is logged once
	}
}

// errEventsFile is the cause when the events file is not a plain file.
var errEventsFile = errors.New("events file is not a regular file")

// readNew reads what was appended since the last read. The file lies in
// the task's own directory and the driver reads it as root, so a symlink
// (to a file the task may not read), a FIFO or a device in its place is
// refused, not followed; so is its directory made a link (to another
// task's local dir), and a file that is not the task user's.
func (t *eventTailer) readNew() error {
	f, err := executor.OpenNoLinks(t.path, os.O_RDONLY|syscall.O_NONBLOCK)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("open events file: %w: it or its directory is a symbolic link", errEventsFile)
	}
	if err != nil {
		return fmt.Errorf("open events file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat events file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("open events file: %w: mode %v", errEventsFile, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && t.ownerKnown && int(st.Uid) != t.owner {
		return fmt.Errorf("open events file: %w: owned by uid %d, not the task's user (uid %d)", errEventsFile, st.Uid, t.owner)
	}
	if fi.Size() < t.offset { // truncated or replaced: start over
		t.offset, t.buf = 0, nil
	}
	if _, err := f.Seek(t.offset, io.SeekStart); err != nil {
		return fmt.Errorf("seek events file: %w", err)
	}
	chunk, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return fmt.Errorf("read events file: %w", err)
	}
	t.offset += int64(len(chunk))
	t.buf = append(t.buf, chunk...)
	evs, n, bad := splitEvents(t.buf)
	t.buf = append(t.buf[:0], t.buf[n:]...)
	for _, b := range bad {
		t.logger.Warn("skipped malformed event line", "line", truncate(b, 200))
	}
	for _, ev := range evs {
		t.emit(ev)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
