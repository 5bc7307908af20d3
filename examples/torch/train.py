"""A PyTorch DistributedDataParallel (Gloo) worker run by nomad-train.

nomad-train gives it torchrun's environment, so init_process_group("gloo")
needs no arguments; nomad_train (the helper the runtime puts on PYTHONPATH)
reports metrics, commits checkpoints and names the one to resume from.

The model fits y = x·w + noise with Linear(8, 1). The training loop config
(train.hcl's config block) comes from nomad_train.config():
epochs, lr, and for fault-tolerance tests die_at_epoch / die_rank, which
make that rank kill itself (SIGKILL) on the first attempt.
"""

import os
import signal

import torch
import torch.distributed as dist
import torch.nn.functional as F

import nomad_train

SAMPLES, FEATURES, BATCH = 512, 8, 32


def main():
    cfg = nomad_train.config()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    g = torch.Generator().manual_seed(42)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    y = x @ w + 0.01 * torch.randn(SAMPLES, 1, generator=g)

    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.get("lr", 0.05))

    start = 0
    ck = nomad_train.latest_checkpoint()
    if ck:
        state = torch.load(os.path.join(ck, "model.pt"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["epoch"] + 1
        if rank == 0:
            print(f"resuming after epoch {state['epoch']} (restart {nomad_train.restart_count()})", flush=True)

    for epoch in range(start, cfg.get("epochs", 6)):
        if (epoch == cfg.get("die_at_epoch", -1) and rank == cfg.get("die_rank", 1)
                and nomad_train.restart_count() == 0):
            os.kill(os.getpid(), signal.SIGKILL)
        order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(epoch))[rank::world]
        total, batches = 0.0, 0
        for i in range(0, len(order), BATCH):
            idx = order[i:i + BATCH]
            opt.zero_grad()
            loss = F.mse_loss(ddp(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total, batches = total + loss.item(), batches + 1
        t = torch.tensor([total, float(batches)])
        dist.all_reduce(t)
        mean = (t[0] / t[1]).item()

        d = None
        if rank == 0:
            d = nomad_train.checkpoint_dir()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch},
                       os.path.join(d, "model.pt"))
        nomad_train.report({"epoch": epoch, "loss": mean, "world_size": world,
                            "restart_count": nomad_train.restart_count()}, checkpoint=d)
        if rank == 0:
            print(f"epoch {epoch}: loss {mean:.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
