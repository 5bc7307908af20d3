"""PyTorch DistributedDataParallel on GPUs, run by nomad-train.

Each worker trains on its own GPU with NCCL: nomad_train.device() names it
(cuda:0 on Nomad, where CUDA_VISIBLE_DEVICES holds only the allocation's
GPUs; cuda:LOCAL_RANK where workers share a machine's GPUs). Where CUDA is
missing the script says so and trains on the CPU with Gloo, so the same
file runs on a laptop.

The model is a small MLP fitting a synthetic regression (no download). The
config (train.hcl's config block) comes from nomad_train.config():
epochs, lr, batch_size. Every epoch is reported with a checkpoint from rank
0; a stop (Nomad's alloc stop, drain or preemption) is agreed through
should_checkpoint at an epoch boundary.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

import nomad_train

SAMPLES, FEATURES = 4096, 32


def main():
    cfg = nomad_train.config()
    if torch.cuda.is_available():
        device = nomad_train.device()
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
        if nomad_train.rank() == 0:
            print("CUDA is not available: skipping the GPU path, training on the CPU with Gloo",
                  file=sys.stderr, flush=True)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    g = torch.Generator().manual_seed(7)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    y = torch.sin(x[:, :1]) + 0.1 * x[:, 1:2]
    x, y = x.to(device), y.to(device)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1)).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.get("lr", 0.05))
    batch = max(1, cfg.get("batch_size", 256) // world)

    start = 0
    ck = nomad_train.latest_checkpoint()
    if ck:
        state = torch.load(os.path.join(ck, "model.pt"), map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["epoch"] + 1

    for epoch in range(start, cfg.get("epochs", 3)):
        order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(epoch))[rank::world]
        total = torch.zeros(2, device=device)
        for i in range(0, len(order), batch):
            idx = order[i:i + batch].to(device)
            opt.zero_grad()
            loss = F.mse_loss(ddp(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += torch.stack([loss.detach(), torch.ones((), device=device)])
        dist.all_reduce(total)
        mean = (total[0] / total[1]).item()

        stop = nomad_train.should_checkpoint()
        d = None
        if rank == 0:
            d = nomad_train.checkpoint_dir()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch},
                       os.path.join(d, "model.pt"))
            print(f"epoch {epoch}: loss {mean:.6f} ({backend}, {device})", flush=True)
        nomad_train.report({"epoch": epoch, "loss": mean, "backend": backend}, checkpoint=d)
        if stop:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
