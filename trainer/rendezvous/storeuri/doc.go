// Package storeuri opens the rendezvous store a worker is told about by
// URI, and starts the worker's heartbeat that goes with it:
//
//   - "embedded://host:port": the launcher's embedded store
//     (rendezvous.Open); the heartbeat is a no-op;
//   - "consul://[host:port][/key/prefix/]": Consul (package consulstore);
//     the heartbeat is an agent service with a TTL check.
//
// It lives apart from package rendezvous because consulstore imports
// rendezvous; this package knows both, and nothing holds a registry.
//
//	st, err := storeuri.Open(ctx, os.Getenv("NOMAD_TRAIN_RENDEZVOUS"), secret, logger)
//	...
//	hb, err := storeuri.RegisterHealth(ctx, uri, storeuri.HealthSpec{
//		Service: "nomad-train", ID: run + "-" + allocID, Addr: host, Port: port, TTL: time.Minute,
//	}, logger)
//	defer hb.Close(context.Background())
//	hb.Beat(step) // from the training loop
package storeuri
