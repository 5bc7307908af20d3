// Package rendezvous lets the N worker processes of a training gang find
// each other, agree on ranks, and move to a new generation when one of them
// is lost.
//
// One algorithm runs over a small Store interface shaped after Consul KV
// with TTL sessions (compare-and-set on a modify index, blocking waits,
// ephemeral keys bound to leases). This package has the embedded store
// (MemStore), which a launcher serves over TCP (Server) to its workers
// (Dial, Open with "embedded://host:port"); a Consul store will implement
// the same interface and pass the same conformance suites
// (package rendezvoustest).
//
// The run's state document at "<run>/state" holds the generation, its
// phase (joining, complete), the world size, the members and, once
// complete, the ranks. A member joins a generation with one transaction
// (Store.Txn): check that the state is still the one it read, write its
// join record, the alive key "<run>/gen/<g>/alive/<id>" bound to its lease,
// and list the generation's records. Members thus never contend for one
// document while they join; the member whose listing shows the gang whole
// writes the complete generation with compare-and-set, ranks assigned
// (AssignRanks: rank hints first, then a deterministic order), and the
// others wait for that one change. Generation 1 needs no document until it
// completes. A member that finds a complete generation it is not part of,
// such as a restarted worker, opens the next generation in its
// transaction, and the old members see the generation move on and rejoin.
// If a gang does not complete at once, the waiting member with the
// smallest ID records the members signed in so far in the document, for
// observers such as a launcher (Fold). The alive key stays for the life of
// the membership, so a member's loss is observable (Session.WatchLoss).
//
// A generation that ends in a stop its gang agreed on (some members were
// asked to stop, checkpointed with the others and left) carries a record
// at "<run>/gen/<g>/stopped" (RecordStop), so that the next generation is
// not counted as a failure (Stops).
//
// A gang's Size is Fixed(n), or Min..Max for an elastic gang: a joining
// generation completes at Max at once, and with at least Min once the
// listing has shown them for the settle time (Options.Settle; the join
// loop times it and tells Decide through View.Settled), or at once when
// every member of the generation before (State.Prev) is back or was named
// lost in a join record (Joiner.Lost). A member that comes later opens
// the next generation; the trainer joins it at its next checkpoint. A
// member waiting for an elastic gang that finishes meanwhile gets
// ErrGangFinished.
//
// For N members starting together that is N lease grants, N transactions,
// one compare-and-set and N-1 waits that each wake once.
//
// The decisions are a pure state machine (Decide, Fold) tested without
// I/O; Join is the thin loop around it that reads, writes and waits,
// tolerating lost races and spurious wake-ups.
//
// A launcher serves the store; each worker opens it and joins:
//
//	emb, _ := rendezvous.StartEmbedded(ctx, "127.0.0.1:0", secret, logger) // launcher
//	defer emb.Close()
//
//	store, _ := rendezvous.Open(ctx, emb.URI, secret, logger) // worker
//	me := rendezvous.Member{ID: "local-0", Node: "n0", Addr: addr, RankHint: 0}
//	s, _ := rendezvous.Join(ctx, store, "my-run", me, rendezvous.Fixed(4), rendezvous.Options{})
//	a := s.Assignment() // a.Rank, a.WorldSize, a.LocalRank, a.Peers ...
//	lost := s.WatchLoss(ctx) // one LostEvent when the gang is no longer whole
//
// The Store contract maps onto Consul (package consulstore) as follows:
// Version is ModifyIndex; CompareAndSet is KV CAS (followed by a Get when it
// fails); Txn is /v1/txn with the verbs check-index (check-not-exists for
// version 0), cas, lock and get-tree; Wait and WaitPrefix are blocking Get
// and List with WaitIndex; a Lease is a session made with CreateNoChecks,
// behaviour "delete", a LockDelay of 1ms, kept by Renew and ended by
// Destroy; PutEphemeral is an Acquire (a key still held by an older session
// of the same member is deleted first). Consul arms session timers at
// 2×TTL, so its conformance fixture sets Expiry to the TTL.
package rendezvous
