"""Sharded training on CPU gloo ranks: per-rank model-state bytes and step time, DDP vs FSDP,
for the ``bert`` recipe's encoder; and gradient bytes per step with DDP compression.

(a) The ``small`` BERT (4 layers, hidden 256, 4 heads, vocabulary 8000, 128 tokens) at world
    2 and 4: parameter, gradient and AdamW-state bytes each rank holds
    (:func:`gpuspark.train.fsdp.memory_accounting`, the largest rank; counted after the
    optimizer step, before ``zero_grad``), their ratio FSDP / DDP (targets: <= 0.6 at world 2,
    <= 0.35 at world 4), and the median step time (forward, backward, AdamW step) of both,
    in alternating order over repetitions.
(b) The ``tiny`` BERT trained on CPython's help topics (``pydoc_data.topics``, tokenised with a
    WordPiece tokenizer trained on them; every fourth topic held out) on 2 ranks with DDP and
    no compression, fp16 and PowerSGD rank 4 (after its 10 plain start steps): the exact
    bytes handed to all-reduce per step (gpuspark's comm meter) and the masked-LM loss after
    the same number of steps (the mean of the last 10 training steps, and on the held-out
    topics), from the same seed and data.

Ranks are local processes with gloo (:func:`gpuspark.launch.run` with ``local=True``; no Spark),
one torch thread each.

    python benchmarks/bench_sharding.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import write_results

SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
COMPRESSIONS = [("none", None), ("fp16", "fp16"), ("powersgd-r4", "powersgd")]
TARGETS = {2: 0.6, 4: 0.35}


# -- (a) memory and step time -------------------------------------------------------------------


def _random_batches(vocab: int, seq: int, batch: int, n: int, rank: int) -> list[Any]:
    """``n`` masked batches of random regular tokens (full-length sequences)."""
    import numpy as np
    import torch

    from gpuspark.train.recipes import TextSpec, mask_tokens
    from gpuspark.train.recipes.bert import sequence_rng

    spec = TextSpec(vocab, seq, SPECIAL)
    rng = np.random.default_rng(rank)
    out = []
    for i in range(n):
        rows = [
            mask_tokens(
                np.r_[2, rng.integers(5, vocab, seq - 2), 3],
                sequence_rng(0, 0, f"{rank}", i * 100 + j),
                spec,
            )
            for j in range(batch)
        ]
        xs, ys = zip(*rows, strict=True)
        out.append((torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))))
    return out


def _memory_fn(size: str, vocab: int, seq: int, batch: int, steps: int, reps: int) -> Any:
    """Each rank: DDP and FSDP in alternating order, ``reps`` times, ``steps`` timed steps."""
    import torch
    import torch.distributed as dist

    from gpuspark.train import ddp, fsdp
    from gpuspark.train.recipes import mlm_loss
    from gpuspark.train.recipes.bert_model import BERT_SIZES, BertMLM

    torch.set_num_threads(1)
    ddp.init_distributed()
    batches = _random_batches(vocab, seq, batch, steps + 1, dist.get_rank())
    out: dict[str, Any] = {s: {"step_s": [], "memory": {}} for s in ("ddp", "fsdp")}
    params = 0
    for rep in range(reps):
        for strategy in ("ddp", "fsdp") if rep % 2 == 0 else ("fsdp", "ddp"):
            torch.manual_seed(0)
            net = BertMLM(vocab, seq, BERT_SIZES[size], dropout=0.0)
            params = sum(p.numel() for p in net.parameters())
            model = ddp.prepare(net, strategy=strategy)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            times = []
            for i, (x, y) in enumerate(batches):
                dist.barrier()
                t0 = time.perf_counter()
                mlm_loss(model(x), y).backward()
                opt.step()
                if i > 0:
                    times.append(time.perf_counter() - t0)
                else:
                    out[strategy]["memory"] = _max_over_ranks(fsdp.memory_accounting(model, opt))
                opt.zero_grad(set_to_none=True)
            out[strategy]["step_s"].append(statistics.median(times))
            del model, opt, net
    out["_parameters"] = params
    return out


def _max_over_ranks(mem: dict[str, int]) -> dict[str, int]:
    import torch
    import torch.distributed as dist

    keys = sorted(mem)
    t = torch.tensor([mem[k] for k in keys], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return {k: int(v) for k, v in zip(keys, t.tolist(), strict=True)}


def memory_rows(shape: dict[str, Any], worlds: list[int]) -> tuple[list[dict[str, Any]], int]:
    from gpuspark import launch

    rows, params = [], 0
    for world in worlds:
        res = launch.run(_memory_fn, *shape.values(), num_processes=world, local=True)
        params = res["_parameters"]
        ddp_mem = res["ddp"]["memory"]["model_state_bytes"]
        ddp_step = statistics.median(res["ddp"]["step_s"])
        for strategy in ("ddp", "fsdp"):
            mem, step = res[strategy]["memory"], statistics.median(res[strategy]["step_s"])
            ratio = mem["model_state_bytes"] / ddp_mem
            rows.append({
                "world": world,
                "strategy": strategy,
                **{k: mem[k] for k in ("param_bytes", "grad_bytes", "optimizer_bytes",
                                        "model_state_bytes")},
                "state_vs_ddp": round(ratio, 4),
                "target": None if strategy == "ddp" else TARGETS[world],
                "meets_target": None if strategy == "ddp" else ratio <= TARGETS[world],
                "step_ms_median": round(step * 1000, 1),
                "step_vs_ddp": round(step / ddp_step, 3),
                "step_ms_runs": [round(s * 1000, 1) for s in res[strategy]["step_s"]],
            })  # fmt: skip
    return rows, params


# -- (b) compression ------------------------------------------------------------------------------


def pydoc_sequences(vocab: int, seq: int) -> tuple[Any, Any, int]:
    """``(train, held_out, vocabulary)``: int32 ``[N, seq]`` sequences of the help topics
    packed as ``prep text`` packs them (every fourth topic held out), plus doc/piece keys."""
    from pydoc_data.topics import topics

    import numpy as np
    from tokenizers import Tokenizer

    from gpuspark.data.prep.text_tokens import pack, special_ids, train_wordpiece

    names = sorted(topics)
    tok = Tokenizer.from_str(train_wordpiece([topics[n] for n in names], vocab))
    ids = special_ids(tok)
    parts: dict[bool, list[tuple[Any, str, int]]] = {False: [], True: []}
    for k, name in enumerate(names):
        enc = tok.encode(topics[name], add_special_tokens=False)
        for i, (row, _) in enumerate(pack(enc.ids, seq, ids["cls"], ids["sep"], ids["pad"])):
            parts[k % 4 == 3].append((row, name, i))
    rows = {
        k: (np.stack([r for r, _, _ in v]), [(d, i) for _, d, i in v]) for k, v in parts.items()
    }
    return rows[False], rows[True], int(tok.get_vocab_size())


def _masked(rows: Any, keys: list[Any], spec: Any, epoch: int) -> tuple[Any, Any]:
    import numpy as np
    import torch

    from gpuspark.train.recipes import mask_tokens
    from gpuspark.train.recipes.bert import sequence_rng

    pairs = [
        mask_tokens(r, sequence_rng(0, epoch, d, i), spec)
        for r, (d, i) in zip(rows, keys, strict=True)
    ]
    xs, ys = zip(*pairs, strict=True)
    return torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))


def _compression_fn(vocab: int, seq: int, batch: int, steps: int, lr: float) -> Any:
    """Each rank: the three DDP configurations from the same seed on the same batches."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from gpuspark.train import ddp
    from gpuspark.train.recipes import TextSpec, mlm_loss
    from gpuspark.train.recipes.bert_model import BERT_SIZES, BertMLM

    torch.set_num_threads(1)
    ddp.init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    (train, tkeys), (held, hkeys), v = pydoc_sequences(vocab, seq)
    spec = TextSpec(v, seq, SPECIAL)
    per_epoch = len(train) // (batch * world)
    batches = []
    for step in range(steps):
        epoch, k = divmod(step, per_epoch)
        order = np.random.default_rng(epoch).permutation(len(train))
        idx = order[(k * world + rank) * batch : (k * world + rank + 1) * batch]
        batches.append(_masked(train[idx], [tkeys[i] for i in idx], spec, epoch))
    held_x, held_y = _masked(held, hkeys, spec, 0)
    out: dict[str, Any] = {}
    for name, comp in COMPRESSIONS:
        torch.manual_seed(0)
        net = BertMLM(v, seq, BERT_SIZES["tiny"], dropout=0.0)
        model = ddp.prepare(net, compression=comp, powersgd_rank=4, powersgd_start_iter=10)
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        meter = ddp.comm_meter(model)
        losses, times = [], []
        for x, y in batches:
            dist.barrier()
            t0 = time.perf_counter()
            meter.begin_step()
            loss = mlm_loss(model(x), y)
            loss.backward()
            meter.end_step()
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
            losses.append(float(loss))
        with torch.no_grad():
            net.eval()
            held_loss = float(mlm_loss(net(held_x), held_y))
        after = meter.steps[10:]  # PowerSGD compresses from its start iteration on
        out[name] = {
            "bytes_raw": int(statistics.median(s.bytes_raw for s in after)),
            "bytes_sent": int(statistics.median(s.bytes_sent for s in after)),
            "loss_first": statistics.mean(losses[:5]),
            "loss_last10": statistics.mean(losses[-10:]),
            "held_out_loss": held_loss,
            "step_s": statistics.median(times[10:]),
        }
    out["_parameters"] = sum(p.numel() for p in net.parameters())
    out["_vocab"] = v
    out["_sequences"] = [len(train), len(held)]
    return out


def compression_rows(shape: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from gpuspark import launch

    res = launch.run(_compression_fn, *shape.values(), num_processes=2, local=True)
    base = res["none"]
    rows = []
    for name, _ in COMPRESSIONS:
        r = res[name]
        rows.append({
            "config": name,
            "bytes_raw_per_step": r["bytes_raw"],
            "bytes_sent_per_step": r["bytes_sent"],
            "sent_vs_none": round(r["bytes_sent"] / base["bytes_sent"], 4),
            "mlm_loss_first5": round(r["loss_first"], 4),
            "mlm_loss_last10": round(r["loss_last10"], 4),
            "held_out_mlm_loss": round(r["held_out_loss"], 4),
            "held_out_vs_none": round(r["held_out_loss"] / base["held_out_loss"], 4),
            "step_ms_median": round(r["step_s"] * 1000, 1),
        })  # fmt: skip
    info = {k[1:]: res[k] for k in ("_parameters", "_vocab", "_sequences")}
    return rows, info


# -- report ---------------------------------------------------------------------------------------


def _print_memory(rows: list[dict[str, Any]], params: int, shape: dict[str, Any]) -> None:
    print(
        f"(a) bert {shape['size']}: {params:,} parameters, vocabulary {shape['vocab']}, "
        f"{shape['seq']} tokens x {shape['batch']} sequences per rank; gloo, 1 thread per rank"
    )
    print(f"{'world':>5} {'strategy':<8} {'params B':>11} {'grads B':>11} {'AdamW B':>11} "
          f"{'state B':>11} {'vs ddp':>7} {'step ms':>8} {'vs ddp':>7}")  # fmt: skip
    for r in rows:
        print(
            f"{r['world']:>5} {r['strategy']:<8} {r['param_bytes']:>11,} {r['grad_bytes']:>11,} "
            f"{r['optimizer_bytes']:>11,} {r['model_state_bytes']:>11,} "
            f"{r['state_vs_ddp']:>7.3f} {r['step_ms_median']:>8.1f} {r['step_vs_ddp']:>7.3f}"
        )


def _print_compression(
    rows: list[dict[str, Any]], info: dict[str, Any], shape: dict[str, Any]
) -> None:
    print(
        f"(b) bert tiny on pydoc help topics: {info['parameters']:,} parameters, vocabulary "
        f"{info['vocab']}, {info['sequences'][0]} train / {info['sequences'][1]} held-out "
        f"sequences of {shape['seq']}; 2 ranks x {shape['batch']}, {shape['steps']} steps, "
        f"AdamW lr {shape['lr']}"
    )
    head = ("config", "raw B/step", "sent B/step", "sent/none", "loss 1-5", "loss last10",
            "held-out", "vs none", "step ms")  # fmt: skip
    widths = (-12, 11, 11, 9, 8, 11, 8, 7, 8)
    print(" ".join(_cell(h, w) for h, w in zip(head, widths, strict=True)))
    keys = ("config", "bytes_raw_per_step", "bytes_sent_per_step", "sent_vs_none",
            "mlm_loss_first5", "mlm_loss_last10", "held_out_mlm_loss", "held_out_vs_none",
            "step_ms_median")  # fmt: skip
    for r in rows:
        print(" ".join(_cell(r[k], w) for k, w in zip(keys, widths, strict=True)))


def _cell(v: Any, width: int) -> str:
    """Right-aligned in ``width`` (left-aligned for a negative width); ints with commas."""
    if isinstance(v, int):
        text = f"{v:,}"
    elif isinstance(v, float):
        text = f"{v:.4f}" if v < 10 else f"{v:.1f}"
    else:
        text = str(v)
    return text.ljust(-width) if width < 0 else text.rjust(width)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and shorter runs (< 60 s)")
    args = ap.parse_args(argv)
    if args.quick:
        mem = {"size": "small", "vocab": 8000, "seq": 32, "batch": 2, "steps": 1, "reps": 1}
        comp = {"vocab": 1000, "seq": 64, "batch": 8, "steps": 20, "lr": 3e-3}
    else:
        mem = {"size": "small", "vocab": 8000, "seq": 128, "batch": 4, "steps": 4, "reps": 3}
        comp = {"vocab": 2000, "seq": 64, "batch": 16, "steps": 200, "lr": 3e-3}
    t0 = time.perf_counter()
    mrows, params = memory_rows(mem, [2, 4])
    t_mem = time.perf_counter() - t0
    crows, info = compression_rows(comp)
    wall = time.perf_counter() - t0
    _print_memory(mrows, params, mem)
    print()
    _print_compression(crows, info, comp)
    print(f"(a) medians of {mem['reps']} alternating repetitions x {mem['steps']} steps, "
          f"{t_mem:.1f} s; wall {wall:.1f} s")  # fmt: skip
    path = write_results(
        "sharding" + ("_quick" if args.quick else ""),
        {"quick": args.quick, "memory_shape": mem, "memory_parameters": params,
         "memory": mrows, "compression_shape": comp, "compression_model": info,
         "compression": crows, "wall_s": round(wall, 1)},
    )  # fmt: skip
    print(f"results: {path}")
    failed = [r for r in mrows if r["meets_target"] is False]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
