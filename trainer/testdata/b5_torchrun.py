# B5's reference: the same recovery scenario under torchrun. Two DDP (Gloo)
# workers take short steps; each completed step is logged by rank 0 with the
# restart count. The Go benchmark kills a worker and measures the time from
# the kill to the first step completed after torchrun re-initialised the
# group.
import os, sys, time
import torch
import torch.distributed as dist

log_path, steps = sys.argv[1], int(sys.argv[2])
dist.init_process_group("gloo")
rank = dist.get_rank()
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
with open(os.path.join(os.path.dirname(log_path), "pid-%d-%d" % (rank, os.getpid())), "w"):
    pass
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 64)
log = open(log_path, "a", buffering=1)
for step in range(steps):
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
    if rank == 0:
        log.write("%d %d %d\n" % (restart, step, time.time_ns()))
    time.sleep(0.01)
dist.destroy_process_group()
