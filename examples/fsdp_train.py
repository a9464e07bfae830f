"""Train a small model with FSDP2 on 2 ranks and show what each rank holds.

``gpuspark.train.prepare(model, strategy="fsdp")`` shards parameters, gradients and optimizer
state over the ranks (each ``Block`` on its own, then the root); ``fit`` trains it unchanged.
Each rank reports its bytes with ``memory_accounting``; with FSDP on 2 ranks each holds about
half of the model state, with DDP (``--strategy ddp``) all of it.

    python examples/fsdp_train.py                   # 2 CPU ranks on this machine (gloo)
    python examples/fsdp_train.py --strategy ddp    # the same with full replicas, to compare
    python examples/fsdp_train.py --spark           # 2 ranks in a Spark barrier stage

With ``--spark`` the ranks run on the spec's master (``--master`` for another; the embedded
cluster, started for the job when none runs, by default); on NVIDIA GPUs they use NCCL.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from torch import nn


class Block(nn.Module):
    """Linear + ReLU with a residual: FSDP wraps every ``*Block`` on its own."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.linear(x))


def build_model(width: int, depth: int) -> nn.Module:
    """The same initial weights on every rank (seeded)."""
    torch.manual_seed(0)
    blocks = [Block(width) for _ in range(depth)]
    return nn.Sequential(nn.Linear(16, width), *blocks, nn.Linear(width, 2))


def make_batches(rank: int, steps: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's own samples: label = whether the first feature is positive."""
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(steps * batch, 16, generator=g)
    y = (x[:, 0] > 0).long()
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, len(x), batch)]


def train(strategy: str, epochs: int, width: int, depth: int) -> dict[str, Any]:
    """Runs on every rank; rank 0's return value comes back to the caller."""
    import torch.distributed as dist

    from gpuspark.train import FitConfig, fit, prepare

    torch.set_num_threads(1)
    net = build_model(width, depth)
    full_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    model = prepare(net, strategy=strategy)  # the process group comes from the launcher
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batches = make_batches(dist.get_rank(), steps=8, batch=16)
    config = FitConfig(epochs=epochs, metrics_port=0)  # 0: no /metrics endpoint here
    history = fit(model, optimizer, nn.functional.cross_entropy, batches, config=config)
    memory = history[-1]["memory"]
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, memory["param_bytes"])
    return {
        "strategy": strategy,
        "world_size": dist.get_world_size(),
        "loss": [round(h["loss"], 4) for h in history],
        "full_param_bytes": full_bytes,
        "param_bytes_per_rank": per_rank,
        "model_state_bytes_rank0": memory["model_state_bytes"],
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="fsdp", choices=["fsdp", "hsdp", "ddp"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--width", type=int, default=64, help="hidden units of each block")
    parser.add_argument("--depth", type=int, default=4, help="blocks")
    parser.add_argument("-n", "--num-processes", type=int, default=2, help="ranks")
    parser.add_argument("--spark", action="store_true", help="ranks on Spark, not locally")
    parser.add_argument("--master", help="Spark master URL (with --spark)")
    return parser.parse_args()


def main() -> None:
    from gpuspark.launch import run

    args = parse_args()
    where: dict[str, Any] = {"local": not args.spark}
    if args.spark:
        where["spark"] = None if args.master is None else spark_session(args.master)
    else:  # whole GPUs per rank where there are GPUs, CPU ranks otherwise
        where["gpus_per_process"] = 1 if torch.cuda.is_available() else 0
    fn_args = (args.strategy, args.epochs, args.width, args.depth)
    result = run(train, *fn_args, num_processes=args.num_processes, **where)
    share = [b / result["full_param_bytes"] for b in result["param_bytes_per_rank"]]
    print(f"{result['strategy']} on {result['world_size']} ranks: loss per epoch {result['loss']}")
    print(
        f"parameter bytes per rank {result['param_bytes_per_rank']} of "
        f"{result['full_param_bytes']} ({', '.join(f'{s:.2f}' for s in share)} of the model)"
    )


def spark_session(master: str) -> Any:
    """A training session on ``master`` (dynamic allocation off, as barrier stages need)."""
    from gpuspark.cluster.session import session

    return session(master, kind="training")


if __name__ == "__main__":
    main()
