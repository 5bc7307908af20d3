// Package nomad runs a compiled training job on a Nomad cluster: gang
// admission (plan first, never run half a gang), registration with a
// per-run secret delivered through Nomad Variables, following the job's
// allocations and evaluations with blocking queries, per-rank failures,
// logs, stop and purge.
//
// The following logic is a pure state machine (Tracker) fed with the
// allocation and evaluation lists Nomad returns; Follow is the thin loop of
// blocking queries around it. Everything talks to Nomad through the narrow
// API interface, which Client implements over github.com/hashicorp/nomad/api;
// package nomadtest fakes the same endpoints over HTTP for tests.
//
//	c, _ := nomad.NewClient(nomad.Config{}) // NOMAD_ADDR, NOMAD_TOKEN, ...
//	sub, err := nomad.Submit(ctx, c, job, nomad.SubmitOptions{WaitForCapacity: true})
//	if err != nil { ... } // errors.Is(err, nomad.ErrInsufficientCapacity)
//	st, err := nomad.Follow(ctx, c, nomad.FollowOptions{JobID: sub.JobID, Count: 4,
//		OnStatus: func(s nomad.Status) { fmt.Println(s.Phase) }})
//
// # Ranks
//
// A worker's rank is its allocation's index (the N in "job.worker[N]",
// NOMAD_ALLOC_INDEX). A rescheduled allocation keeps its predecessor's name
// and so its rank; Tracker follows each rank's chain of allocations.
//
// # The run secret
//
// Submit writes a fresh secret (crypto/rand, hex) to the Variable
// nomad/jobs/<job>, which the job's tasks may read with their workload
// identity, and adds to every task a template rendering it into
// secrets/nomad-train.secret; the train driver points NOMAD_TRAIN_SECRET_FILE
// there when the file exists.
// The secret is never in the job, its meta, or anything printed. Stop with
// purge deletes the Variable.
//
// # Progress
//
// Rank 0 publishes its latest report so the CLI can show progress without
// reaching workers. The CLI follows the run's records in its storage
// (StoreProgress) when that is an object store or a directory it mounts,
// else reads the Consul KV key
// ProgressKey(namespace, job, run) = "nomad-train/<namespace>/<job>/<run>/progress"
// (ConsulProgress): the train driver gives each job's workers the rendezvous
// prefix "nomad-train/<namespace>/<job>/", so jobs sharing a run name (the
// trials of two tune experiments) never meet. That
// key's value is one record in exactly the progress.jsonl line format (see
// trainer/storage.Record), overwritten (a plain KV put) by rank 0 after each
// report it appends to progress.jsonl.
package nomad
