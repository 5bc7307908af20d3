// Package dashboard serves nomad-train's web dashboard, the counterpart of
// Ray's dashboard on port 8265: the runs under a storage path (and the
// nomad-train jobs on a Nomad cluster), one run's live curves, checkpoints,
// failure and workers, and one experiment's trial table with every trial's
// curves overlaid.
//
// It only reads. Progress comes through trainer/storage's readers
// (ScanProgress on the bytes appended since the last look, OpenReadOnly's
// Best for the checkpoints that exist, FailedForGood), the experiment's
// table through scheduler/tune's LoadState, workers through
// scheduler/nomad's narrow API. Training never waits for it: an open
// dashboard stats a few files once per interval and reads only what was
// appended, so a run's steps/s is the same with it open or closed.
//
// Pages are one HTML file and a script, embedded in the binary (no CDN,
// works offline). The browser gets a snapshot and then the new records as
// server-sent events (/api/run/events, /api/experiment/events): one event
// per interval in which something changed, with reset set when the
// progress file was rewritten (a resumed run rolls back its history).
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
//	srv, err := dashboard.New(dashboard.Options{Root: "./results"})
//	if err != nil {
//		return err
//	}
//	return http.ListenAndServe("127.0.0.1:8265", srv.Handler())
package dashboard
