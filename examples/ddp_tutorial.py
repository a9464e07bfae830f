"""A minimal DistributedDataParallel script written for torchrun, nothing gpuspark in it.

In the manner of PyTorch's "Getting Started with Distributed Data Parallel" tutorial: the
process group comes from the environment torchrun sets (``env://``: ``MASTER_ADDR``,
``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``), the device from ``LOCAL_RANK``. So each of these
runs it unchanged, two ranks, arguments after the script:

    torchrun --nproc-per-node 2 examples/ddp_tutorial.py --steps 3
    gpuspark launch -n 2 examples/ddp_tutorial.py --steps 3            # Spark barrier stage
    gpuspark launch --local -n 2 --gpus-per-process 0 examples/ddp_tutorial.py --steps 3

NCCL on CUDA GPUs (one per rank: ``cuda:LOCAL_RANK``), gloo on CPUs.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class ToyModel(nn.Module):
    """Two linear layers: 10 features in, 5 out."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(10, 16)
        self.out = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a toy model with DDP.")
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps")
    parser.add_argument("--batch", type=int, default=20, help="samples per rank and step")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")  # env:// rendezvous
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")

    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = ToyModel().to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard of samples
    for step in range(args.steps):
        x = torch.randn(args.batch, 10, generator=data).to(device)
        y = torch.randn(args.batch, 5, generator=data).to(device)
        optimizer.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()  # DDP averages the gradients over the ranks here
        optimizer.step()
        print(f"rank {rank}/{world} (local {local_rank}) step {step} loss {loss.item():.4f}")

    # Every rank holds the same weights after each step: check it the way a test would.
    total = sum(p.detach().sum() for p in model.parameters()).reshape(1)
    agreed = total.clone()
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    print(f"rank {rank}/{world} done: weights agree {bool(torch.allclose(total, agreed))}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
