"""Runs model descriptions from nn's TestMatchesPyTorch through PyTorch.

Reads a JSON list of specs on stdin, writes a JSON list of results on
stdout: for each, the first loss, the flat parameter gradients and input
gradient of the first step, and the flat parameters after every optimizer
step.
"""
import json
import sys

import torch

torch.set_default_dtype(torch.float32)


def run(spec):
    mods = []
    for layer in spec["layers"]:
        kind = layer[0]
        if kind == "linear":
            mods.append(torch.nn.Linear(layer[1], layer[2]))
        elif kind == "relu":
            mods.append(torch.nn.ReLU())
        elif kind == "tanh":
            mods.append(torch.nn.Tanh())
        elif kind == "sigmoid":
            mods.append(torch.nn.Sigmoid())
        else:
            raise SystemExit("unknown layer " + kind)
    model = torch.nn.Sequential(*mods)
    torch.nn.utils.vector_to_parameters(torch.tensor(spec["params"]), model.parameters())

    x = torch.tensor(spec["x"], requires_grad=True)
    if spec["loss"] == "ce":
        loss_fn = torch.nn.CrossEntropyLoss()
        target = torch.tensor(spec["labels"], dtype=torch.long)
    else:
        loss_fn = torch.nn.MSELoss()
        target = torch.tensor(spec["target"])

    o = spec["optim"]
    if o["kind"] == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=o["lr"], betas=(o["beta1"], o["beta2"]),
                               eps=o["eps"], weight_decay=o["wd"])
    else:
        opt = torch.optim.SGD(model.parameters(), lr=o["lr"], momentum=o["momentum"],
                              weight_decay=o["wd"], nesterov=o["nesterov"])

    out = {"params": []}
    for step in range(spec["steps"]):
        opt.zero_grad()
        if x.grad is not None:
            x.grad = None
        loss = loss_fn(model(x), target)
        loss.backward()
        if step == 0:
            out["loss"] = loss.item()
            out["grads"] = torch.cat([p.grad.flatten() for p in model.parameters()]).tolist()
            out["dx"] = x.grad.flatten().tolist()
        opt.step()
        out["params"].append(torch.nn.utils.parameters_to_vector(model.parameters()).tolist())
    return out


json.dump([run(s) for s in json.load(sys.stdin)], sys.stdout)
