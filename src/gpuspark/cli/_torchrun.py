"""torchrun's own spellings of its options on ``gpuspark launch``'s command line.

``gpuspark launch`` takes torchrun's command line (docs/launch.md). Before the script, a
torchrun option that means the same here is taken as torchrun writes it (``--tee 3``,
``-t 3``, ``--log_dir D``, ``--max_restarts K``); any other torchrun option is refused in one
line that gives gpuspark's equivalent, instead of click's "No such option" or, worse, its
value taken for the script (``--tee 3 train.py`` ran a script named ``3``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from typer.core import TyperCommand

from gpuspark.errors import LaunchError

__all__ = ["TorchrunCommand", "torchrun_args"]

_STD = re.compile(r"^[0-3]$|^[0-9]+:[0-3](,[0-9]+:[0-3])*$")
"""A value of torchrun's ``--tee``/``--redirects``: 0-3 (none, stdout, stderr, both), or per
local rank, ``0:3,1:1``."""

_SAME = frozenset({"--log-dir", "--max-restarts"})
"""torchrun options that gpuspark launch has under the same name (their ``_`` forms reach
here, written with ``-``)."""

_FLAGS = frozenset({"--standalone", "--no-python", "--run-path", "--virtual-local-rank"})
"""torchrun options without a value."""

_RDZV = (
    "{opt} is torchrun's rendezvous, which gpuspark launch sets itself",
    "drop it: the ranks meet at task 0's host on a free port, shared by the barrier stage, or "
    "on this machine with --local",
)
_NO_EQUIVALENT = (
    "{opt} is a torchrun option that gpuspark launch has no equivalent of",
    "drop it; gpuspark launch --help lists the options",
)
_REFUSED: dict[str, tuple[str, str]] = {
    "--rdzv-backend": _RDZV,
    "--rdzv-endpoint": _RDZV,
    "--rdzv-id": _RDZV,
    "--rdzv-conf": _RDZV,
    "--node-rank": _RDZV,
    "--master-addr": _RDZV,
    "--master-port": _RDZV,
    "--local-addr": _RDZV,
    "--standalone": (
        "--standalone is torchrun's one-node rendezvous",
        "use --local: one node of all the ranks on this machine",
    ),
    "--redirects": (
        "{opt} {value} is torchrun's",
        "use --log-dir D: each rank's stdout and stderr, as one stream, go to D/rank_<r>.log as "
        "with torchrun -r 3; the console shows rank 0, or every rank with --tee",
    ),
    "--local-ranks-filter": (
        "{opt} {value} is torchrun's",
        "use --log-dir D: the console then shows rank 0 only, or every rank with --tee",
    ),
    "--start-method": (
        "{opt} {value} is torchrun's; gpuspark launch chooses it",
        "drop it: spawn for NCCL ranks, as torchrun does; fork (or a fork server) for gloo ranks",
    ),
    "--no-python": (
        "{opt} is torchrun's; gpuspark launch runs Python only",
        "launch a Python script, or a module with -m",
    ),
    **{
        opt: _NO_EQUIVALENT
        for opt in (
            "--monitor-interval",
            "--event-log-handler",
            "--role",
            "--run-path",
            "--duplicate-stdout-filters",
            "--duplicate-stderr-filters",
            "--logs-specs",
            "--numa-binding",
            "--signals-to-handle",
            "--shutdown-timeout",
            "--virtual-local-rank",
        )
    },
}
"""torchrun options refused: (what it is, gpuspark's equivalent); ``--nnodes``, ``--tee`` and
``--nproc-per-node``'s device words are refused by functions that read the value."""

_SHORT = {"-t": "--tee", "-r": "--redirects"}
_NPROC = ("--nproc-per-node", "--nproc_per_node", "--processes-per-task")
_DEVICE_WORDS = frozenset({"auto", "cpu", "gpu", "xpu"})
_TORCHRUN = frozenset({"--nnodes", "--tee", "--nproc-per-node", *_SAME, *_REFUSED})
"""Every torchrun option handled here (``-m``/``--module`` is the same flag in both)."""


class TorchrunCommand(TyperCommand):
    """``gpuspark launch``'s command: torchrun's option spellings first go through
    :func:`torchrun_args`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Translate or refuse torchrun's options, then parse as click does (a lenient parse,
        such as the one that looks for ``--json``, drops refused options instead)."""
        valued = {
            opt
            for param in self.params
            if getattr(param, "param_type_name", "") == "option"
            and not getattr(param, "is_flag", False)
            for opt in (*param.opts, *param.secondary_opts)
        }
        words = torchrun_args(args, valued, strict=not ctx.resilient_parsing)
        return super().parse_args(ctx, words)


def torchrun_args(args: list[str], valued: Iterable[str], *, strict: bool = True) -> list[str]:
    """``args`` of ``gpuspark launch`` with torchrun's spellings of the options before the
    script made gpuspark's (``--tee 3`` -> ``--tee``, ``--log_dir`` -> ``--log-dir``); raise
    :class:`LaunchError` for a torchrun option with no such counterpart, naming gpuspark's
    equivalent (``strict=False``: drop it). ``valued``: gpuspark's options that take a value.
    The script and what follows it are left alone."""
    valued = set(valued)
    head, tail = _split(args, valued)
    sizes = (_value_of(head, ("-n", "--num-processes")), _value_of(head, _NPROC))
    out: list[str] = []
    i = 0
    while i < len(head):
        opt, value, used = _option(head, i)
        if opt is None:  # one of gpuspark's own, with its value
            take = 2 if head[i] in valued and i + 1 < len(head) else 1
            out += head[i : i + take]
            i += take
            continue
        problem = _problem(opt, value, *sizes)
        if problem is None:
            out += _kept(opt, value)
        elif strict:
            raise LaunchError(problem[0], remedy=problem[1])
        i += 1 + used
    return out + tail


def _split(args: list[str], valued: set[str]) -> tuple[list[str], list[str]]:
    """``args`` cut where the script starts: the first word that is neither an option nor
    the value of one (torchrun's options count too)."""
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--" or not word.startswith("-") or word == "-":
            break
        opt, _, used = _option(args, i)
        i += 1 + (used if opt is not None else int(word in valued))
    return args[:i], args[i:]


def _option(args: list[str], i: int) -> tuple[str | None, str | None, int]:
    """The torchrun option at ``args[i]``: its ``--`` name with ``-`` for ``_`` (``None``
    when it is gpuspark's own or unknown), its value, and how many words after ``args[i]``
    the value took (0 or 1)."""
    word = args[i]
    name, eq, attached = word.partition("=")
    if not eq and word[:2] in _SHORT and len(word) > 2:  # -t3
        name, eq, attached = word[:2], "=", word[2:]
    name = _SHORT.get(name, name)
    if name.startswith("--"):
        name = name.replace("_", "-")
    if name not in _TORCHRUN:
        return None, None, 0
    if eq:
        return name, attached, 0
    value = args[i + 1] if i + 1 < len(args) else None
    if name == "--tee" and not (value and _STD.match(value)):  # gpuspark's own --tee, a flag
        return None, None, 0
    if name in _FLAGS or value is None:
        return name, None, 0
    return name, value, 1


def _value_of(head: list[str], names: tuple[str, ...]) -> str | None:
    """The value of the last of ``names`` in ``head`` (``--name V`` or ``--name=V``)."""
    found = None
    for i, word in enumerate(head):
        name, eq, attached = word.partition("=")
        if name in names:
            found = attached if eq else (head[i + 1] if i + 1 < len(head) else None)
    return found


def _kept(opt: str, value: str | None) -> list[str]:
    """The gpuspark words of a torchrun option that is taken."""
    if opt == "--tee":
        return ["--tee"] if value == "3" else []  # -t 0: torchrun's default, nothing teed
    if opt == "--nnodes":
        return []  # one node: what -n and --nproc-per-node give already
    return [opt, *([value] if value is not None else [])]


def _problem(
    opt: str, value: str | None, ranks: str | None, nproc: str | None
) -> tuple[str, str] | None:
    """Why ``opt value`` is refused and what to write instead; ``None`` if it is taken."""
    if opt in _SAME:
        return None
    if opt == "--nnodes":
        return _nnodes(value, ranks, nproc)
    if opt == "--tee":
        return _tee(value)
    if opt == "--nproc-per-node":
        return _device_count(value)
    what, instead = _REFUSED[opt]
    return what.format(opt=opt, value=value or "").rstrip(), instead


def _nnodes(value: str | None, ranks: str | None, nproc: str | None) -> tuple[str, str] | None:
    """``--nnodes 1`` is what gpuspark does anyway (unless -n asks more ranks than a node
    holds); more nodes: ``-n M*N --nproc-per-node N``."""
    if value == "1" and ranks in (None, nproc or "1"):
        return None
    what = f"--nnodes {value or ''}".rstrip() + " is torchrun's: gpuspark launch counts ranks"
    if value and value.isdigit() and int(value) > 0:
        nodes = int(value)
        total_ranks = _whole(ranks) or 0
        per = _whole(nproc) or (total_ranks // nodes if total_ranks % nodes == 0 else None)
        n = str(per) if per else "N"
        total = str(nodes * per) if per else f"{nodes}*N"
        node_s = "node" if nodes == 1 else "nodes"
        return what, (
            f"use -n {total} --nproc-per-node {n}: {nodes} {node_s} x {n} rank(s), each node a "
            "Spark barrier task"
        )
    return what, (
        "use -n M*N --nproc-per-node N for M nodes of N ranks; for an elastic MIN:MAX, "
        "-n MAX*N --min-ranks MIN*N --max-attempts 2: a retry after a lost host runs on the "
        "ranks left"
    )


def _whole(text: str | None) -> int | None:
    """``text`` as a count >= 1, or ``None``."""
    return int(text) if text and text.isdigit() and int(text) > 0 else None


def _tee(value: str | None) -> tuple[str, str] | None:
    """``--tee 3`` (every rank, both streams) and ``--tee 0`` (none) are taken."""
    if value in ("0", "3"):
        return None
    return (
        f"--tee {value} is torchrun's per-stream form; gpuspark keeps each rank's stdout and "
        "stderr as one stream",
        "use --tee, torchrun's --tee 3, to show every rank besides the --log-dir files, or "
        "leave it out to show rank 0 only",
    )


def _device_count(value: str | None) -> tuple[str, str] | None:
    """``--nproc_per_node N`` is taken; torchrun's device words are not."""
    if value not in _DEVICE_WORDS:
        return None
    return (
        f"--nproc-per-node {value} is torchrun's count of this machine's devices",
        "give a number: ranks per Spark barrier task, each asking N x --gpus-per-process GPUs "
        "of its host",
    )
