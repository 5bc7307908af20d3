// Package external runs non-Go worker commands (a PyTorch script, say)
// under the Go training runtime, as torchrun would: the Go process joins the
// rendezvous, then starts the command with torchrun's environment (workerenv.TorchEnv:
// MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, TORCHELASTIC_RESTART_COUNT, ...), so
// torch.distributed.init_process_group works unchanged. MASTER_PORT is, on
// Nomad, rank 0's port labelled "torch" (workerenv.TorchPort: reserved for
// the task, in the range a cluster opens for Nomad's dynamic ports);
// elsewhere a port free on rank 0's machine in 15000-19999, below the
// ranges the kernel and Nomad hand out on their own, so that no outgoing
// connection takes it while the command starts.
//
// The command talks back over two pipes with a line protocol of JSON
// objects (Request, Reply): "checkpoint_dir" hands out a directory on the
// run's storage, "report" records metrics and commits a checkpoint through
// trainer.Session.Report. The Python helper nomad_train.py (package python)
// speaks it and is put on PYTHONPATH. NOMAD_TRAIN_LATEST_CHECKPOINT names
// the checkpoint to resume from.
//
// When the gang loses a member (a worker is killed, or its command fails in
// a collective because a peer went away), the generation ends: the command
// is stopped, the runtime joins the next generation and starts the command
// again with the restart count raised, while the failure budget lasts
// (torchrun's max_restarts). An error of the command's own (an exception in
// the script, a missing train.py) is the training function's failure: the
// run fails at once, quoting the last lines of the command's stderr (see
// failure.go).
//
// It is the builtin "external": nomad-train run wraps a command entrypoint
// that is not a Go trainer binary (SpeaksContract is false) by running itself as that
// builtin with the command in NOMAD_TRAIN_EXTERNAL_COMMAND:
//
//	entrypoint {
//	  command = "python3"
//	  args    = ["train.py"]
//	}
package external
