"""All-reduce timing for torch.distributed with Gloo, the reference for
BenchmarkVersusGloo: 2 ranks in separate processes on loopback, float32 sum,
the same sizes as BenchmarkAllReduceBusBW. Prints one JSON line per size from
rank 0: {"bytes": n, "iters": k, "seconds": total}.

Usage: /usr/bin/python3 gloo_bench.py PORT SIZE...
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, port, sizes):
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    for n in sizes:
        t = torch.ones(n // 4, dtype=torch.float32)
        dist.all_reduce(t)  # warm up: touch pages, set up the pairs
        iters = max(5, min(2000, (512 << 20) // max(n, 1) // 4))
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        took = time.perf_counter() - start
        if rank == 0:
            print(json.dumps({"bytes": n, "iters": iters, "seconds": took}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    port = int(sys.argv[1])
    sizes = [int(s) for s in sys.argv[2:]]
    mp.spawn(worker, args=(2, port, sizes), nprocs=2, join=True)
