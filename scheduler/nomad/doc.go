// Package nomad runs a compiled training job on a Nomad cluster: gang
// admission (plan first, never run half a gang), registration with a
// per-run secret delivered through Nomad Variables, following the job's
// allocations and evaluations with blocking queries, per-rank failures,
// logs, stop and purge.
//
// The following logic is a pure state machine (Tracker) fed with the
// allocation and evaluation lists Nomad returns; Follow is the thin loop of
// blocking queries around it. Everything talks to Nomad through the narrow
// API interface, which Client implements over github.com/hashicorp/nomad/api.
//
//	c, _ := nomad.NewClient(nomad.Config{}) // NOMAD_ADDR, NOMAD_TOKEN, ...
//	sub, err := nomad.Submit(ctx, c, job, nomad.SubmitOptions{WaitForCapacity: true})
//	if err != nil { ... } // errors.Is(err, nomad.ErrInsufficientCapacity)
//	st, err := nomad.Follow(ctx, c, nomad.FollowOptions{JobID: sub.JobID, Count: 4,
//		OnStatus: func(s nomad.Status) { fmt.Println(s.Phase) }})
package nomad
