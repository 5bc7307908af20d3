package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ProgressFile is the name of the metrics history inside a run directory.
const ProgressFile = "progress.jsonl"

// Record is one report of a training run: one line of progress.jsonl.
//
// On the wire it is a JSON object:
//
//	{"step":12,"time":"2026-12-02T15:04:05.123456789Z","metrics":{"loss":0.25},
//	 "checkpoint":"checkpoint_000004","generation":2,"attempt":1,"time_total_s":31.5}
//
// Metrics hold any JSON; numbers read back from a file are float64.
type Record struct {
	// Step is the training step (or iteration) the report belongs to.
	Step int64
	// Time is when the report was made; Append and Commit fill in the
	// current time when it is zero.
	Time time.Time
	// Metrics are the reported values, keyed by name. A Run keeps them as
	// they read back from the file: numbers become float64.
	Metrics map[string]any
	// Checkpoint names the checkpoint directory committed with this report,
	// or is empty. Commit sets it; Append requires it empty.
	Checkpoint string
	// Generation is the rendezvous generation the report was made in.
	Generation uint64
	// Attempt counts the starts of the run after its first: the writer of
	// a run that has records writes NextAttempt of them (0 for a run
	// without). A run stopped and run again, or whose gang restarted,
	// thus shows where each start's reports begin even where the
	// rendezvous generation starts over (a new submission).
	Attempt int
	// TimeTotal is how long the run had trained when it reported (Ray's
	// time_total_s): from the start of the training to the report, plus
	// what the checkpoint the start resumed from had trained. Zero when the
	// writer did not say (records of earlier versions).
	TimeTotal time.Duration
}

// NextAttempt is the Attempt of the records a new start of a run with
// history recs writes: one more than the highest there, or 0.
func NextAttempt(recs []Record) int {
	if len(recs) == 0 {
		return 0
	}
	highest := 0
	for _, r := range recs {
		highest = max(highest, r.Attempt)
	}
	return highest + 1
}

// wireRecord is Record as it is written; pointers mark required fields.
type wireRecord struct {
	Step       *int64         `json:"step"`
	Time       *time.Time     `json:"time"`
	Metrics    map[string]any `json:"metrics"`
	Checkpoint string         `json:"checkpoint,omitempty"`
	Generation uint64         `json:"generation"`
	Attempt    int            `json:"attempt"`
	TimeTotal  float64        `json:"time_total_s,omitempty"`
}

// duration reads TimeTotal's wire form, seconds. A negative or absurd
// time reads as none.
func duration(s float64) time.Duration {
	if !(s > 0 && s < 1e9) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// encodeRecord renders rec as one newline-terminated line. encoding/json
// escapes control characters inside strings, so the line holds exactly one
// newline, at its end.
func encodeRecord(rec Record) ([]byte, error) {
	w := wireRecord{
		Step:       &rec.Step,
		Time:       &rec.Time,
		Metrics:    rec.Metrics,
		Checkpoint: rec.Checkpoint,
		Generation: rec.Generation,
		Attempt:    rec.Attempt,
		TimeTotal:  rec.TimeTotal.Seconds(),
	}
	if w.Metrics == nil {
		w.Metrics = map[string]any{}
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding step %d: %w", ErrInvalidRecord, rec.Step, err)
	}
	return append(b, '\n'), nil
}

// normalize encodes rec and returns it as a reader of the file will see
// it (numbers as float64, metric maps not shared with the caller), with its
// line.
func normalize(rec Record) (Record, []byte, error) {
	line, err := encodeRecord(rec)
	if err != nil {
		return Record{}, nil, err
	}
	back, err := decodeRecord(line[:len(line)-1])
	if err != nil {
		return Record{}, nil, fmt.Errorf("%w: step %d does not read back: %w", ErrInvalidRecord, rec.Step, err)
	}
	return back, line, nil
}

// decodeRecord parses one line (without its newline).
func decodeRecord(line []byte) (Record, error) {
	var w wireRecord
	if err := json.Unmarshal(line, &w); err != nil {
		return Record{}, err
	}
	if w.Step == nil {
		return Record{}, errors.New(`missing "step"`)
	}
	if w.Time == nil {
		return Record{}, errors.New(`missing "time"`)
	}
	if w.Checkpoint != "" {
		if _, ok := checkpointIndex(w.Checkpoint); !ok {
			return Record{}, fmt.Errorf("invalid checkpoint name %q", w.Checkpoint)
		}
	}
	return Record{
		Step:       *w.Step,
		Time:       *w.Time,
		Metrics:    w.Metrics,
		Checkpoint: w.Checkpoint,
		Generation: w.Generation,
		Attempt:    w.Attempt,
		TimeTotal:  duration(w.TimeTotal),
	}, nil
}

// EncodeRecord returns rec as one progress.jsonl line (with its newline),
// as ReadProgress reads it back; runs publish their latest report with it.
func EncodeRecord(rec Record) ([]byte, error) { return encodeRecord(rec) }
