"""Report metrics and checkpoints to nomad-train from a Python worker.

nomad-train starts a non-Go worker command with torchrun's environment
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, ...), so
torch.distributed.init_process_group works unchanged, and with two pipes
for a line protocol of JSON objects:

    request  (fd NOMAD_TRAIN_REQUEST_FD):
        {"op": "checkpoint_dir"}
        {"op": "report", "metrics": {...}, "checkpoint": "/dir"}   # checkpoint optional
        {"op": "should_checkpoint"}
    reply    (fd NOMAD_TRAIN_REPLY_FD), one per request:
        {"ok": true, "path": "...", "stop": false}  or  {"ok": false, "error": "..."}

report and should_checkpoint are collective: every rank calls them in
step, as with the Go trainer.Session. Outside nomad-train (plain python or
torchrun) the helper still works: reports are printed, checkpoints go to a
temporary directory and should_checkpoint is False.

Stops (nomad alloc stop, a node drain, a preemption) reach the runtime as
a SIGTERM to the worker; should_checkpoint() turns it into a step boundary
the whole gang agrees on, so no step is lost:

    for step in range(start, steps):
        train_one_step()
        stop = nomad_train.should_checkpoint()
        d = save(nomad_train.checkpoint_dir()) if stop and rank == 0 else None
        nomad_train.report({"step": step}, checkpoint=d)
        if stop:
            return    # exit 0: the gang resumes from this checkpoint

Every rank's checkpoint files land in one checkpoint directory: a file
name may come from one rank only (save shared state on rank 0, or put the
rank in the name, such as rank-1/optim.pt); a report that breaks the rule
fails the run at once, saying so.

GPUs: on Nomad each worker is one allocation whose CUDA_VISIBLE_DEVICES
lists only its own GPUs, so its first GPU is cuda:0 whatever LOCAL_RANK
says (LOCAL_RANK keeps torchrun's meaning, the worker's rank on its node).
device() returns the right one: torch.cuda.set_device(nomad_train.device()).

    import nomad_train
    cfg = nomad_train.config()                # train.hcl's config, a trial's sampled values
    ck = nomad_train.latest_checkpoint()      # None on a fresh run
    ...
    d = nomad_train.checkpoint_dir()
    torch.save(state, os.path.join(d, "model.pt"))
    nomad_train.report({"epoch": e, "loss": loss}, checkpoint=d)
"""

import json
import os
import sys
import tempfile

__all__ = ["config", "run_name", "rank", "world_size", "local_rank", "restart_count",
           "device_index", "device", "latest_checkpoint", "checkpoint_dir", "report",
           "should_checkpoint", "NomadTrainError"]


class NomadTrainError(RuntimeError):
    """The runtime refused a request (its message says why)."""


def config():
    """The training loop config, train.hcl's config block (a tune trial's
    with its sampled values) as a dict: what Ray passes to
    train_loop_per_worker. Empty outside nomad-train. A fresh copy each
    call, so that changing it changes nothing else."""
    raw = os.environ.get("NOMAD_TRAIN_CONFIG") or "{}"
    try:
        cfg = json.loads(raw)
    except ValueError as e:
        raise NomadTrainError("NOMAD_TRAIN_CONFIG is not JSON: %s" % e) from None
    if not isinstance(cfg, dict):
        raise NomadTrainError("NOMAD_TRAIN_CONFIG holds a %s, not an object" % type(cfg).__name__)
    return cfg


def run_name():
    """The run's name: the spec's train block name, or a tune trial's
    (trial_0003). Empty outside nomad-train."""
    return os.environ.get("NOMAD_TRAIN_RUN", "")


def rank():
    """This worker's rank in the gang."""
    return int(os.environ.get("RANK", "0"))


def world_size():
    """The number of workers in the gang."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_rank():
    """This worker's rank on its node."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def device_index():
    """The index of this worker's first GPU among those it can see:
    NOMAD_TRAIN_LOCAL_DEVICE when the launcher set it (the Nomad driver sets
    0: CUDA_VISIBLE_DEVICES holds the allocation's own GPUs only), else
    LOCAL_RANK (workers that share a machine's GPUs, as under torchrun)."""
    v = os.environ.get("NOMAD_TRAIN_LOCAL_DEVICE")
    if v:
        return int(v)
    return local_rank()


def device():
    """The torch.device this worker computes on: cuda:device_index() when
    CUDA is available, else cpu."""
    import torch
    if torch.cuda.is_available():
        return torch.device("cuda", device_index())
    return torch.device("cpu")


def restart_count():
    """How many times the gang has restarted (0 on the first attempt)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def latest_checkpoint():
    """The directory of the latest committed checkpoint, or None."""
    return os.environ.get("NOMAD_TRAIN_LATEST_CHECKPOINT") or None


_channel = None


def _open():
    global _channel
    if _channel is None:
        req = os.environ.get("NOMAD_TRAIN_REQUEST_FD")
        rep = os.environ.get("NOMAD_TRAIN_REPLY_FD")
        if req is None or rep is None:
            _channel = False
        else:
            _channel = (os.fdopen(int(req), "w", buffering=1),
                        os.fdopen(int(rep), "r", buffering=1))
    return _channel


def _call(request):
    ch = _open()
    if not ch:
        return None
    w, r = ch
    w.write(json.dumps(request, separators=(",", ":")) + "\n")
    w.flush()
    line = r.readline()
    if not line:
        raise NomadTrainError("nomad-train runtime closed the reply channel")
    reply = json.loads(line)
    if not reply.get("ok"):
        raise NomadTrainError(reply.get("error", "request failed"))
    return reply


def checkpoint_dir():
    """A fresh empty directory on the run's storage to save a checkpoint in."""
    reply = _call({"op": "checkpoint_dir"})
    if reply is None:
        return tempfile.mkdtemp(prefix="checkpoint-")
    return reply["path"]


def report(metrics, checkpoint=None):
    """Record metrics (a dict of JSON values) and optionally commit the files
    in checkpoint (a directory from checkpoint_dir) as a checkpoint. Every
    rank must call it in step. Returns the committed checkpoint's path, or
    None."""
    req = {"op": "report", "metrics": metrics}
    if checkpoint:
        req["checkpoint"] = checkpoint
    reply = _call(req)
    if reply is None:
        print(json.dumps({"report": metrics, "checkpoint": checkpoint}), file=sys.stderr)
        return checkpoint
    return reply.get("path") or None


def should_checkpoint():
    """Whether any worker of the gang was asked to stop (a SIGTERM: Nomad's
    stop, drain or preemption). Collective: every rank calls it at the same
    point, once per step, and all get the same answer. When True, report a
    checkpoint of the current state and return (exit 0): the workers asked
    to stop leave, the others resume from that checkpoint with their
    replacements."""
    reply = _call({"op": "should_checkpoint"})
    if reply is None:
        return False
    return bool(reply.get("stop"))
