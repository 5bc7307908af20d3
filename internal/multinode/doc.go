// Package multinode is the multi-node proof of nomad-train: a build-tagged
// test that runs one Nomad server and three Nomad clients on this machine,
// each client with its own data, alloc and plugin directory, ports and node
// name, and no directory shared between them (each client's data directory
// is a tmpfs in a mount namespace of its own, which no other client sees).
// The run's storage is a real S3 server. Consul is a real dev agent that
// every client shares when `consul` is on PATH, and otherwise the fake
// served as a process with one agent for each client over one KV: the
// compiled job runs unchanged, each client registering its workers'
// services and checks in its own agent, the workers rendezvousing through
// it. Four quickstart workers spread over the clients; after the
// first checkpoint the test kills one client as a machine loss would (its
// agent and every process it started, by pid), waits for Nomad to mark the
// node down and reschedule the lost workers on the survivors, and checks
// that the run resumes from the latest checkpoint on S3 and ends with the
// same parameters, bit for bit, as a fault-free local run of the same spec.
//
//	go test -tags multinode -run TestNodeLoss -v -timeout 20m ./internal/multinode
//
// It loses the node of rank 0, which holds the run's S3 writer lease;
// MULTINODE_LOSE=other loses the busiest node without it.
//
// TestDetachedTune runs `tune -detach` of a quickstart experiment on such
// a cluster, its trials on S3 (see its documentation):
//
//	go test -tags multinode -run TestDetachedTune -v -timeout 15m ./internal/multinode
//
// TestRunOnCluster runs the quickstart with `nomad-train run -address` and
// reads it back with status, list, logs and the dashboard; then it stops
// a longer run and runs it again, from its latest checkpoint on S3.
//
// All need root (mount namespaces, cgroups), a `nomad` binary on PATH
// (built from Nomad's public source) and an S3 server binary
// (NOMAD_TRAIN_TEST_S3_SERVER, see internal/s3test); without the binaries
// it skips, saying so. A simulated machine is every process whose
// environment carries its marker (the Nomad agent, and through it the task
// driver plugin, its supervisor shims and the tasks) and every descendant
// of one: Machine finds them in /proc.
package multinode
