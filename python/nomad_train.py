"""Report metrics and checkpoints to nomad-train from a Python worker.

nomad-train starts a non-Go worker command with torchrun's environment
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, ...), so
torch.distributed.init_process_group works unchanged, and with two pipes
for a line protocol of JSON objects:

    request  (fd NOMAD_TRAIN_REQUEST_FD):
        {"op": "checkpoint_dir"}
        {"op": "report", "metrics": {...}, "checkpoint": "/dir"}   # checkpoint optional
    reply    (fd NOMAD_TRAIN_REPLY_FD), one per request:
        {"ok": true, "path": "..."}  or  {"ok": false, "error": "..."}

report is collective: every rank calls it in step, as with the Go
trainer.Session.Report. Outside nomad-train (plain python or torchrun) the
helper still works: reports are printed and checkpoints go to a temporary
directory.

    import nomad_train
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

__all__ = ["rank", "world_size", "local_rank", "restart_count",
           "latest_checkpoint", "checkpoint_dir", "report", "NomadTrainError"]


class NomadTrainError(RuntimeError):
    """The runtime refused a request (its message says why)."""


def rank():
    """This worker's rank in the gang."""
    return int(os.environ.get("RANK", "0"))


def world_size():
    """The number of workers in the gang."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_rank():
    """This worker's rank on its node."""
    return int(os.environ.get("LOCAL_RANK", "0"))


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
