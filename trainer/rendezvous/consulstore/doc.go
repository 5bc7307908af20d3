// Package consulstore is the rendezvous.Store of cluster runs: Consul KV
// and sessions, reached through github.com/hashicorp/consul/api. It also
// has Health, the worker's own agent service with a TTL check that the
// training loop feeds (Nomad job services cannot carry TTL checks), so a
// hung worker turns critical although its process lives.
//
// How the Store maps onto Consul (keys under Config.Prefix, default
// "nomad-train/"):
//
//   - a version is a key's ModifyIndex, the fencing token of the run's
//     state document; CompareAndSet is a one-operation transaction (verb
//     "cas", index 0 = create only) because it reports the new ModifyIndex;
//   - Wait and WaitPrefix are blocking queries (WaitIndex, bounded by
//     Config.WaitTime per query) that compare the data, tolerate spurious
//     wake-ups, pace returns whose index did not move (Config.RetryPause)
//     and restart from a fresh read when the index goes backwards
//     (NextIndex);
//   - Txn is one /v1/txn: check-index (check-not-exists for version 0),
//     cas, lock with the lease's session, get-tree; Consul answers a failed
//     transaction with errors only, so a version mismatch costs a read;
//   - a Lease is a TTL session created with no checks (not even the
//     agent's serfHealth), behaviour delete, and a 1 ms lock delay (0 would
//     mean Consul's 15 s); Consul invalidates it about 2×TTL after the last
//     renewal, TTLs under session_ttl_min (10 s) are raised to it, and
//     KeepAlive is the client's RenewPeriodic;
//   - PutEphemeral acquires the key with the session, and like a Txn's lock
//     takes it over from another session still holding it (a previous
//     incarnation of the member) by destroying that session.
//
// The address and ACL token come from CONSUL_HTTP_ADDR and
// CONSUL_HTTP_TOKEN (capi.DefaultConfig). Package fakeconsul serves the
// endpoints used here, so tests run without an agent.
//
// A worker, given a Consul agent:
//
//	st, err := consulstore.New(consulstore.Config{})
//	...
//	s, err := rendezvous.Join(ctx, st, "my-run", me, rendezvous.Fixed(4), rendezvous.Options{})
//	...
//	h := consulstore.NewHealth(st.Client(), consulstore.HealthOptions{Tags: []string{"my-run"}})
//	err = h.Register(ctx, "nomad-train", "my-run-"+me.ID, host, port, time.Minute)
//	defer h.Deregister(context.Background())
//	for step := ... { train(); h.Beat(step) }
package consulstore
