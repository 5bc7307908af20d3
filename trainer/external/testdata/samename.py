"""Every rank saves model.pt into its checkpoint directory and reports it:
the checkpoint would hold two files of one name."""

import os

import nomad_train as nt

d = nt.checkpoint_dir()
with open(os.path.join(d, "model.pt"), "w") as f:
    f.write(f"rank {nt.rank()}\n")
nt.report({"step": 0}, checkpoint=d)
