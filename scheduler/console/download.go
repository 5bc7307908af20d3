package console

import (
	"context"
	"fmt"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// Download copies the checkpoint `download` names into dir
// (storage.DownloadCheckpoint) and returns its location. what is a
// checkpoint's location (s3:// or a directory), or, with a spec, also
// latest, best (by the spec's checkpoint policy) or a checkpoint's name in
// the spec's run, or best of an experiment's (its best trial's best); the
// spec's storage block then gives the S3 options.
// live, when not nil (a terminal), shows how much has come down.
func Download(ctx context.Context, spec *trainspec.Spec, what, dir string, live *Live) (string, error) {
	byResult := what == "latest" || what == "best"
	named := byResult || storage.IsCheckpointName(what)
	var opts []storage.Option
	switch {
	case spec == nil && named:
		return "", fmt.Errorf("%q names a checkpoint in a spec's run: add -spec train.hcl, or give the checkpoint's location", what)
	case spec == nil:
	case named && spec.Tune != nil && what != "best":
		return "", fmt.Errorf("the spec is an experiment: best gives its best trial's best checkpoint; for another, give the checkpoint's location, as tune and status print it")
	default:
		opts = append(opts, storage.WithStorageOptions(spec.Run.Storage.Options()))
	}
	location := what
	switch {
	case byResult && spec.Tune != nil: // best (latest was refused)
		var err error
		if location, err = experimentBest(ctx, spec, opts); err != nil {
			return "", err
		}
	case byResult:
		res, err := trainer.LoadResult(spec.Run.StoragePath, spec.Name, spec.RunSpec().Checkpoint, nil, opts...)
		if err != nil {
			return "", err
		}
		ck := res.Checkpoint
		if what == "best" && len(res.BestCheckpoints) > 0 {
			ck = res.BestCheckpoints[0].Checkpoint
		}
		if ck == nil {
			return "", fmt.Errorf("run %s has no checkpoint", storage.RunLocation(spec.Run.StoragePath, spec.Name))
		}
		location = ck.Path()
	case named:
		location = storage.CheckpointLocation(spec.Run.StoragePath, spec.Name, what)
	}
	if live != nil {
		var p storage.Progress
		opts = append(opts, storage.WithProgress(&p))
		defer showProgress(live, location, &p)()
	}
	return location, storage.DownloadCheckpoint(ctx, location, dir, opts...)
}

// experimentBest is the location of the best checkpoint of the best trial
// of the spec's experiment, as tune prints it at its end.
func experimentBest(ctx context.Context, spec *trainspec.Spec, opts []storage.Option) (string, error) {
	where := storage.RunLocation(spec.Run.StoragePath, spec.Name)
	if spec.Tune.Metric == "" {
		return "", fmt.Errorf("experiment %s has no metric to rank its trials by: give the checkpoint's location", where)
	}
	grid, err := tune.LoadResultGrid(ctx, where, spec.Tune.Metric, spec.Tune.Mode, opts...)
	if err != nil {
		return "", err
	}
	best, err := grid.Best("", "")
	if err != nil {
		return "", fmt.Errorf("experiment %s: %w", where, err)
	}
	if best.BestCheckpoint == "" {
		return "", fmt.Errorf("experiment %s: its best trial, %s, kept no checkpoint", where, best.ID)
	}
	return best.BestCheckpoint, nil
}

// progressEvery is how often a download's progress is redrawn.
const progressEvery = 250 * time.Millisecond

// showProgress draws what has come down of the checkpoint at location on
// live until the returned function is called, which removes it.
func showProgress(live *Live, location string, p *storage.Progress) (stop func()) {
	start := time.Now()
	draw := func() {
		line := "downloading " + location
		if total := p.Total(); total > 0 {
			done := p.Done()
			line += fmt.Sprintf(": %s of %s", byteSize(done), byteSize(total))
			if s := time.Since(start).Seconds(); s >= 1 {
				line += fmt.Sprintf(", %s/s", byteSize(int64(float64(done)/s)))
			}
		}
		live.Set(line)
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			draw()
			select {
			case <-t.C:
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		live.Finish(false)
	}
}

// byteSize writes n bytes in the largest binary unit that keeps a whole
// number in front: 512 B, 3.4 MiB, 1.2 GiB.
func byteSize(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}
