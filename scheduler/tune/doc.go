// Package tune is hyperparameter tuning for nomad-train, the counterpart of
// Ray Tune: it samples trial configs from a param space, runs each trial as
// a training run placed by a backend, follows the metrics every trial
// reports, and lets a trial scheduler stop, clone or continue trials.
//
// The pieces, from the inside out:
//
//   - Search spaces: Uniform, QUniform, LogUniform, QLogUniform, RandInt,
//     QRandInt, RandN, QRandN, Choice and GridSearch values anywhere inside
//     a config map (ParseSpace reads their JSON form, {"loguniform": [1e-4,
//     0.1]}). A choice's values may hold functions of their own: a nested,
//     conditional space, sampled only in the trials that chose that value
//     (params "opt/1/beta"). Generator is Ray's basic variant generator:
//     num_samples repetitions of the grid's cross product, the other
//     functions sampled from a seeded source.
//   - Searchers (Ray's search algorithms) suggest each trial's config and
//     learn from the results, intermediate ones and those of pruned trials
//     included: random and grid are the Generator (every trial listed up
//     front); tpe (TPESettings, Optuna's defaults) and bohb (BOHBSettings,
//     with the hyperband scheduler) make their trials one at a time as
//     slots free. They are pure state machines too, registered like the
//     schedulers (searcher.go: registerSearcher, ParseSearcher for
//     train.hcl's search_alg), each with testdata/<name>.search and its
//     golden transcript (TestSearcherTranscripts); Limit bounds a
//     searcher's running trials (max_concurrent).
//   - Schedulers (FIFO, ASHA, HyperBand, Median, PBT) are pure state
//     machines: a sequence of OnTrialAdd/OnResult/OnTrialComplete calls
//     always gives the same decisions, which the golden transcripts in
//     testdata pin down. A trial a scheduler stops at max_t ends
//     TERMINATED (Decision.Finished), one it prunes STOPPED.
//   - Each scheduler kind owns its settings (ASHASettings, MedianSettings,
//     PBTSettings, FIFO): their JSON names, defaults and validation, and
//     how to build the scheduler (SchedulerSettings.Build). Its file
//     registers it by name in an init function; ParseScheduler decodes a
//     train.hcl scheduler block's settings through that registry, so the
//     spec reader (package trainspec) and the CLI know no scheduler by name.
//     A new scheduler touches only:
//     1. its own file: the Scheduler, its settings type with json tags, a
//     validate method, and registerScheduler in init;
//     2. testdata/<name>.script, whose "scheduler <type> ..." line builds
//     it, and testdata/<name>.golden, written by go test -update
//     (TestSchedulerTranscripts fails while a registered scheduler has no
//     script).
//   - Backends place trials behind one method, Backend.Run: run the trial
//     until it ends, stop it when ctx is cancelled. Processes runs each
//     trial as a gang of local worker processes (trainer/launch), exactly
//     like `nomad-train run`. When the workers are copies of this program,
//     it starts the next trials' workers while the slots are busy and holds
//     them at a loopback gate (RunWorker) until their trial runs, and it
//     frees a slot as soon as its trial is told to stop; what is left per
//     trial is the rendezvous and storage set-up after the gate opens and
//     the workers' per-report cost (see BenchmarkB7Processes). InProcess runs
//     single-worker Trainables as goroutines of the tuner's process, with
//     the same storage, and opens the next trial's storage while the slots
//     are busy (Preparer). NomadJobs makes each trial a Nomad job of its
//     own, "<experiment>-trial_0003": the train spec compiled with the
//     trial's run name, storage directory and config (trainspec.CompileTrial),
//     admitted whole and registered by scheduler/nomad's Submit, followed
//     with blocking queries; an early stop deregisters it, waits for its
//     allocations to end and purges it. Its results reach the tuner through
//     the trials' records in storage, so on a cluster storage_path is on
//     S3 or is a directory the clients and the tuner's machine share.
//   - Tuner.Fit is the loop (tuner.go; setting up and resuming in
//     resume.go, trial tailing in tail.go, PBT cloning in clone.go): it starts trials up to max_concurrent_trials,
//     follows each trial's records (storage.Follow) as they are written
//     (woken by inotify on Linux; polled too, for storage that other
//     machines write), asks the scheduler, then checks the stop criteria
//     and the plateau stop (stop.go: either ends the trial TERMINATED,
//     whatever the scheduler said), stops trials through their backend, performs PBT exploits (the donor's latest intact checkpoint
//     is copied into the recipient's storage as a committed checkpoint, on
//     S3 by the server, and the recipient restarts with the mutated
//     config), restarts failed trials
//     within their failure budget (with FailFast, the first to fail
//     beyond it ends the experiment), and persists the experiment state
//     (experiment_state.json) atomically after every change, through a
//     background writer, once per round of the loop after the round's
//     trials have started. A Fit on an experiment directory that holds a
//     state resumes it: finished trials are kept, unfinished and failed
//     (ERROR) ones restart from their checkpoints, the failed ones with
//     their whole failure budget, and the scheduler is rebuilt by replaying
//     the recorded results.
//
// Storage layout: <storage_path>/<experiment>/experiment_state.json and one
// run directory per trial, <storage_path>/<experiment>/trial_0003/, holding
// that trial's progress.jsonl and checkpoints.
//
// Example, with the quickstart's training function on worker processes:
//
//	tuner := tune.New(tune.NewProcesses(quickstart.Train, 1),
//		map[string]any{
//			"lr":         tune.LogUniform(1e-3, 0.1),
//			"batch_size": tune.Choice(16, 32, 64),
//			"epochs":     9,
//		},
//		tune.Config{Name: "qs-tune", NumSamples: 8, MaxConcurrentTrials: 2,
//			Metric: "loss", Mode: tune.ModeMin,
//			Scheduler: tune.ASHASettings{MaxT: 9, ReductionFactor: 3}})
//	grid, err := tuner.Fit(ctx) // in a worker copy of the program, runs quickstart.Train and exits
//	best, err := grid.Best("loss", tune.ModeMin)
package tune
