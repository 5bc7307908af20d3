"""Rank 1 raises a ValueError while rank 0 waits in an all_reduce: rank 0's
Gloo then fails for want of its peer. The run must fail with rank 1's
error, once, not be retried as a lost worker."""

import torch
import torch.distributed as dist

import nomad_train as nt

dist.init_process_group("gloo")
if nt.rank() == 1:
    raise ValueError("bad batch size on rank 1")
t = torch.ones(1)
dist.all_reduce(t)
