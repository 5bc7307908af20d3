// Package multinode is the multi-node proof of nomad-train: a build-tagged
// test that runs one Nomad server and three Nomad clients on this machine,
// each client with its own data, alloc and plugin directory, ports and node
// name, and no directory shared between them; the run's storage is a real
// S3 server and its rendezvous Consul (a real agent when `consul` is on
// PATH, the fake agent served as a process otherwise). Four quickstart
// workers spread over the clients; after the first checkpoint the test
// kills one client as a machine loss would (its agent and every process it
// started, by pid), waits for Nomad to mark the node down and reschedule
// the lost workers on the survivors, and checks that the run resumes from
// the latest checkpoint on S3 and ends with the same parameters, bit for
// bit, as a fault-free local run of the same spec.
//
//	go test -tags multinode -run TestNodeLoss -v -timeout 20m ./internal/multinode
//
// It needs a `nomad` binary on PATH (built from Nomad's public source) and
// an S3 server binary (NOMAD_TRAIN_TEST_S3_SERVER, see internal/s3test);
// without them it skips, saying so. A simulated machine is every process
// whose environment carries its marker (the Nomad agent, and through it
// the task driver plugin and its supervisor shims) and every descendant of
// one (the workers): Machine finds them in /proc.
package multinode
