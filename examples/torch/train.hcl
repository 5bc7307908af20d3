# PyTorch DDP (Gloo) on two workers. nomad-train runs the command under its
# Go runtime, which does the rendezvous and gives python torchrun's
# environment (MASTER_ADDR, RANK, WORLD_SIZE, ...), relays the script's
# reports and checkpoints, and restarts it from the latest checkpoint when a
# worker is lost. Run: nomad-train run examples/torch/train.hcl (train.py is
# found beside this file; results go to ./results of where you run it).
# On Nomad the train driver does the same for command = "python3" (the
# compiled job needs nothing more): train.py must reach the task directory
# (an artifact block), python3 with torch must be on the clients, and
# storage_path must be a directory every client mounts.
train "torch-ddp" {
  entrypoint {
    command = "python3"
    args    = ["train.py"]
  }

  config = {
    epochs = 6
    lr     = 0.05
  }

  scaling {
    num_workers = 2
  }

  run {
    storage_path = "./results"

    checkpoint {
      num_to_keep = 2
    }

    failure {
      max_failures = 2
    }
  }
}
