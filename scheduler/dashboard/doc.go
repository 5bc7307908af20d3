// Package dashboard serves nomad-train's web dashboard, the counterpart of
// Ray's dashboard on port 8265: the runs under a storage path (and the
// nomad-train jobs on a Nomad cluster), one run's live curves, checkpoints,
// failure and workers, and one experiment's trial table with every trial's
// curves overlaid.
//
// It only reads, and every record of a run it reads through
// trainer/storage, on a directory or an object store (s3://bucket/prefix)
// alike: storage.ListRuns for the runs under the storage path,
// storage.Follow for a run's new records, the checkpoints that exist and
// its failure mark. An experiment's table comes through scheduler/tune's
// LoadState, and its trials' records through storage from where the
// state says the tuner keeps them (the experiment directory, or S3);
// workers through scheduler/nomad's narrow API, and a job's storage path
// and options from the job. Training never waits for it: an open
// dashboard looks once per interval and reads only what is new (the bytes
// appended to a progress file; on S3 a HEAD and a List after the last
// segment read, and the new segments), so a run's steps/s is the same
// with it open or closed.
//
// Pages are one HTML file and a script, embedded in the binary (no CDN,
// works offline). The browser gets a snapshot and then the new records as
// server-sent events (/api/run/events, /api/experiment/events): one event
// per interval in which something changed, with reset set when the
// history was rewritten (a resumed run rolls back its history).
//
// Curves are drawn in the browser with uPlot (MIT, 50 KB minified, no
// dependencies), vendored under assets/ with its licence. It was chosen over
// SVG rendered on the server because live curves then cost the server
// nothing but the new records: a server-side SVG would be re-rendered and
// re-sent whole on every update, for every open page, and could not zoom or
// show values under the cursor.
//
// Example:
//
//	srv, err := dashboard.New(ctx, dashboard.Options{Root: "./results"})
//	if err != nil {
//		return err
//	}
//	return http.ListenAndServe("127.0.0.1:8265", srv.Handler())
package dashboard
