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
// complete, the ranks. Workers compare-and-set themselves in; the one that
// fills the last slot assigns ranks (AssignRanks: rank hints first, then a
// deterministic order) and marks the generation complete; the others wait
// for that. Each member holds "<run>/gen/<g>/alive/<id>" on a lease, so its
// loss is observable (Session.WatchLoss). A member that joins a complete
// generation it is not part of, such as a restarted worker, opens the next
// generation, and the old members see the generation move on and rejoin.
//
// The decisions are a pure state machine (Decide) tested without I/O; Join
// is the thin loop around it that reads, writes with compare-and-set and
// waits, tolerating lost races and spurious wake-ups.
//
// A launcher and one worker, in one process for brevity:
//
//	st := rendezvous.NewMemStore(nil)
//	ln, _ := net.Listen("tcp", "127.0.0.1:0")
//	srv, _ := rendezvous.NewServer(st, rendezvous.ServerConfig{Listener: ln, Secret: secret})
//	go srv.Serve(ctx)
//
//	store, _ := rendezvous.Open(ctx, "embedded://"+srv.Addr(), secret, logger)
//	s, _ := rendezvous.Join(ctx, store, "my-run", rendezvous.Member{ID: "local-0", Node: "n0", Addr: addr, RankHint: 0}, 1, rendezvous.Options{})
//	a := s.Assignment() // a.Rank, a.WorldSize, a.Peers ...
//	lost := s.WatchLoss(ctx)
package rendezvous
