package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nomad-train/nomad-train/internal/english"
	"github.com/nomad-train/nomad-train/internal/tfevents"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// TensorBoard event files of the runs and experiments kept under a
// storage path, for those who open their results with `tensorboard
// --logdir` as Ray Tune writes them. Each run's reports become one event
// file, <run>/ under the log directory, a trial's <experiment>/<trial>/:
// every number a report carries (nested ones as a/b) at the report's
// step and time, and time_total_s. A run restarted from a checkpoint
// reports some steps again; TensorBoard drops the points the restart
// replaced when it reads a step lower than one before.

// TensorBoardExport is what ExportTensorBoard writes, and from where.
type TensorBoardExport struct {
	// Source is a storage path (a directory or s3://), an experiment's
	// location, or a run's; Storage its object store's options.
	Source  string
	Storage workerenv.StorageOptions
	// Out is the log directory to point TensorBoard at.
	Out string
	// Follow keeps the files up to date as the runs report, until the
	// context ends; Interval is the time between looks (0: 2 s).
	Follow   bool
	Interval time.Duration
}

// tbHost is the host part of the event files' names, by which an export
// knows its own files from those of other writers.
const tbHost = "nomad-train"

// ExportTensorBoard writes e.Source's runs as event files under e.Out and
// says what it wrote on w. An event file is rewritten in place from the
// run's whole history, so a TensorBoard reading it meanwhile reads on.
// Following, a look that fails (the object store down for a while) is
// said on w, once, and the next look goes on where it was.
func ExportTensorBoard(ctx context.Context, w io.Writer, e TensorBoardExport) error {
	interval := e.Interval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	x := &tbExport{e: e, w: w, files: map[string]*tbFile{}}
	defer x.close()
	if err := x.look(ctx); err != nil {
		return err
	}
	if err := tbNoRecords(e, x.files); err != nil {
		return err
	}
	fmt.Fprintf(w, "open them with: tensorboard --logdir %s\n", e.Out)
	if !e.Follow {
		return nil
	}
	failing := ""
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
		err := x.look(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && err.Error() != failing:
			fmt.Fprintf(w, "%v; looking again every %v\n", err, interval)
			failing = err.Error()
		case err == nil && failing != "":
			fmt.Fprintln(w, "reading the runs again")
			failing = ""
		}
	}
}

// tbExport is an export's files, by their directory under the log
// directory.
type tbExport struct {
	e     TensorBoardExport
	w     io.Writer
	files map[string]*tbFile
}

// look lists the runs and writes what each recorded since the last look.
func (x *tbExport) look(ctx context.Context) error {
	srcs, err := tbSources(ctx, x.e.Source, storage.WithStorageOptions(x.e.Storage))
	if err != nil {
		return err
	}
	for _, s := range srcs {
		f := x.files[s.dir]
		if f == nil {
			f = &tbFile{src: s}
			x.files[s.dir] = f
		}
		f.src.sig = s.sig
		if err := f.update(ctx, x.e.Out); err != nil {
			return fmt.Errorf("exporting %s: %w", storage.RunLocation(s.root, s.run), err)
		}
		if f.n > 0 && !f.announced {
			f.announced = true
			fmt.Fprintf(x.w, "%s: %s -> %s\n", s.dir, english.Count(f.n, "report", "reports"), f.path)
		}
	}
	return nil
}

func (x *tbExport) close() {
	for _, f := range x.files {
		f.close()
	}
}

// tbNoRecords is the error of an export that found runs but no report in
// any: nil when following (reports may come) or when one had some.
func tbNoRecords(e TensorBoardExport, files map[string]*tbFile) error {
	if e.Follow {
		return nil
	}
	for _, f := range files {
		if f.n > 0 {
			return nil
		}
	}
	return fmt.Errorf("%s holds no reports: no run, experiment or progress records", e.Source)
}

// tbSource is one run to export, and where under the log directory.
type tbSource struct {
	root, run string
	opts      []storage.Option
	dir       string // slash-separated, under the log directory
	// sig changes when the run may have new records; "" for a run that
	// may have them at any time (a trial's state says when it cannot).
	sig string
}

// tbSources lists the runs src holds: an experiment's trials, the runs
// and experiments under a storage path, or the run src names.
func tbSources(ctx context.Context, src string, opt storage.Option) ([]tbSource, error) {
	st, ok, err := tune.LoadState(ctx, src, opt)
	if err != nil {
		return nil, err
	}
	if ok {
		return trialSources(st, src, ""), nil
	}
	runs, err := storage.ListRuns(ctx, src, opt)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	exps, err := storage.ListExperiments(ctx, src, opt)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if len(runs) == 0 && len(exps) == 0 {
		root, run, err := splitLocation(src)
		if err != nil {
			return nil, err
		}
		return []tbSource{{root: root, run: run, opts: []storage.Option{opt}, dir: run}}, nil
	}
	var out []tbSource
	for _, run := range runs {
		out = append(out, tbSource{root: src, run: run, opts: []storage.Option{opt}, dir: run})
	}
	for _, name := range exps {
		where := storage.RunLocation(src, name)
		st, ok, err := tune.LoadState(ctx, where, opt)
		if err != nil {
			return nil, fmt.Errorf("reading experiment %s: %w", name, err)
		}
		if ok {
			out = append(out, trialSources(st, where, name)...)
		}
	}
	return out, nil
}

// trialSources are the trials of the experiment at where, under prefix.
func trialSources(st *tune.ExperimentState, where, prefix string) []tbSource {
	root, opts := st.TrialRuns(where)
	out := make([]tbSource, 0, len(st.Trials))
	for _, t := range st.Trials {
		sig := ""
		switch t.Status {
		case tune.StatusTerminated, tune.StatusStopped, tune.StatusError:
			// Its records change no more until the state does.
			sig = fmt.Sprintf("%s %d %d", t.Status, t.Iterations, len(t.Exploits))
		}
		out = append(out, tbSource{root: root, run: t.ID, opts: opts, dir: path.Join(prefix, t.ID), sig: sig})
	}
	return out
}

// splitLocation splits a run's location (a directory or s3://) into its
// storage path and name.
func splitLocation(loc string) (root, run string, err error) {
	if storage.IsObjectPath(loc) {
		return splitRunLocation(loc)
	}
	if !IsDir(loc) {
		return "", "", fmt.Errorf("%s: no such directory", loc)
	}
	clean, err := filepath.Abs(loc) // "." is the run one stands in
	if err != nil {
		return "", "", err
	}
	if clean == string(filepath.Separator) {
		return "", "", fmt.Errorf("%s holds no reports: no run, experiment or progress records", loc)
	}
	return filepath.Dir(clean), filepath.Base(clean), nil
}

// tbFile is one run's event file and the follower of its records.
type tbFile struct {
	src       tbSource
	fol       *storage.Follower
	f         *os.File
	ew        *tfevents.Writer
	path      string
	n         int    // reports written
	seen      string // src.sig at the last look, once caught up
	announced bool
}

// update writes what the run recorded since the last call.
func (t *tbFile) update(ctx context.Context, out string) error {
	if t.src.sig != "" && t.src.sig == t.seen {
		return nil
	}
	if t.fol == nil {
		fol, err := storage.Follow(ctx, t.src.root, t.src.run, t.src.opts...)
		if err != nil {
			return err
		}
		t.fol = fol
	}
	recs, reset, err := t.fol.NextRecords()
	if err != nil {
		return err
	}
	if reset && t.f != nil { // the history was replaced: a new file
		t.closeFile()
		t.n = 0
	}
	t.seen = t.src.sig
	if len(recs) == 0 {
		return nil
	}
	fresh := t.f == nil
	if fresh {
		if err := t.open(out, recs[0].Time); err != nil {
			return err
		}
	}
	for _, r := range recs {
		if err := t.ew.WriteScalars(r.Time, r.Step, recordScalars(r)); err != nil {
			return fmt.Errorf("write %s: %w", t.path, err)
		}
	}
	t.n += len(recs)
	if fresh { // cut what an earlier export wrote past this history
		end, err := t.f.Seek(0, io.SeekCurrent)
		if err == nil {
			err = t.f.Truncate(end)
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", t.path, err)
		}
	}
	return nil
}

// open opens the run's event file, named by its first report's time, and
// writes the version event at its start. It removes the export's other
// files of the run: those of a history since replaced.
func (t *tbFile) open(out string, first time.Time) error {
	dir := filepath.Join(out, filepath.FromSlash(t.src.dir))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	name := tfevents.FileName(first, tbHost)
	old, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*."+tbHost))
	for _, p := range old {
		if filepath.Base(p) != name {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	t.path = filepath.Join(dir, name)
	// Not truncated: the same history gives the same bytes, so a reader
	// of the earlier export's file reads on where it was.
	f, err := os.OpenFile(t.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	t.f, t.ew = f, tfevents.NewWriter(f)
	if err := t.ew.WriteVersion(first); err != nil {
		return fmt.Errorf("write %s: %w", t.path, err)
	}
	return nil
}

func (t *tbFile) closeFile() {
	if t.f != nil {
		t.f.Close()
		t.f, t.ew = nil, nil
	}
}

func (t *tbFile) close() {
	t.closeFile()
	if t.fol != nil {
		t.fol.Close()
	}
}

// recordScalars are the numbers of a report as TensorBoard tags, sorted:
// its metrics (true and false as 1 and 0, nested ones as a/b) and
// time_total_s when the record has it and the metrics do not.
func recordScalars(r storage.Record) []tfevents.Scalar {
	var out []tfevents.Scalar
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			switch x := v.(type) {
			case float64:
				out = append(out, tfevents.Scalar{Tag: prefix + k, Value: x})
			case bool:
				b := 0.0
				if x {
					b = 1
				}
				out = append(out, tfevents.Scalar{Tag: prefix + k, Value: b})
			case map[string]any:
				walk(prefix+k+"/", x)
			}
		}
	}
	walk("", r.Metrics)
	if _, ok := r.Metrics["time_total_s"]; !ok && r.TimeTotal > 0 {
		out = append(out, tfevents.Scalar{Tag: "time_total_s", Value: r.TimeTotal.Seconds()})
	}
	slices.SortFunc(out, func(a, b tfevents.Scalar) int { return strings.Compare(a.Tag, b.Tag) })
	return out
}
