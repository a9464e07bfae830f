"""A ``tabular`` checkpoint as batch prediction needs it: the network and how its inputs were
encoded (:class:`TabularServing`), read from the ``best.pt`` alone.

``gpuspark train tabular`` records the training dataset's preprocessing in ``best.pt``
(``payload["dataset"]["extra"]["tabular"]``: columns, statistics, vocabularies, label values;
see :func:`gpuspark.train.recipes.rank.dataset_lineage`). A ``best.pt`` of an earlier version
lacks it: then the manifest of the dataset it names (``config.dataset.data``) is read, if it
is still there. The normalisation statistics are the network's own buffers (saved with its
weights), so serving uses exactly what training used.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuspark.data import format as fmt
from gpuspark.errors import CheckpointError, GpusparkError, RecipeError
from gpuspark.train.checkpoint_dir import CHECKPOINT_NAME
from gpuspark.train.recipes.tabular_model import TabularNet  # imports torch

__all__ = [
    "BEST_NAME",
    "SERVED_RECIPES",
    "LoadedModel",
    "TabularServing",
    "build_network",
    "category_key",
    "checkpoint_path",
    "load_model",
    "read_payload",
]

BEST_NAME = "best.pt"
SERVED_RECIPES = ("tabular",)
"""The recipes whose checkpoints :func:`gpuspark.infer.predict` serves."""
_RETRAIN = "train it again with this gpuspark (`gpuspark train tabular ... --checkpoint-dir DIR`)"


@dataclass(frozen=True)
class TabularServing:
    """How the training dataset's prep job encoded a row (``extra["tabular"]``): numeric
    columns as float32 (null = missing), categorical columns as vocabulary codes (the value
    as Spark casts it to text; 0 = missing or not kept), and the label values of the
    network's outputs."""

    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    vocab: tuple[tuple[str, ...], ...]
    """Per categorical column: the kept values as text (code ``i + 1`` = ``vocab[i]``)."""
    label_values: tuple[Any, ...]
    """The class of each output (``prob_<value>``), as the label column held it."""
    label: str | None = None
    id: str | None = None
    """The training dataset's label and id columns."""
    dataset: str | None = None
    """The training dataset (lineage)."""

    @property
    def features(self) -> tuple[str, ...]:
        """Every input column the network reads: numeric, then categorical."""
        return self.numeric + self.categorical

    @classmethod
    def from_extra(cls, tab: Mapping[str, Any], dataset: str | None) -> TabularServing:
        """From a manifest's ``extra["tabular"]``; :class:`KeyError`/:class:`TypeError` when
        a field is missing."""
        numeric = tuple(str(n) for n in tab["numeric"])
        categorical = tuple(str(n) for n in tab["categorical"])
        cats = tab["stats"]["categorical"] if categorical else {}
        vocab = tuple(tuple(category_key(v) for v in cats[n]["vocab"]) for n in categorical)
        return cls(
            numeric=numeric,
            categorical=categorical,
            vocab=vocab,
            label_values=tuple(tab["label_values"]),
            label=tab.get("label"),
            id=tab.get("id"),
            dataset=dataset,
        )


@dataclass(frozen=True)
class LoadedModel:
    """A checked ``tabular`` checkpoint: where it is, its serving spec, the network's shape."""

    path: str
    mtime_ns: int
    recipe: str
    serving: TabularServing
    hidden: int
    layers: int
    epoch: int | None
    scores: dict[str, Any]
    data: bytes = field(default=b"", repr=False)
    """The file's bytes, as read and checked (what the tasks build the network from)."""


def category_key(value: Any) -> str:
    """A vocabulary value as the prep job matches it: Spark's cast to text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def checkpoint_path(model: str | os.PathLike[str]) -> Path:
    """The ``best.pt`` that ``model`` names (the file, or the run directory holding it)."""
    text = os.fspath(model)
    p = Path(text).expanduser()
    if p.is_dir():
        if not (p / BEST_NAME).is_file():
            raise CheckpointError(
                f"model {text} is a directory without {BEST_NAME}",
                remedy="pass the best.pt a `gpuspark train tabular --checkpoint-dir DIR` run "
                "wrote, or DIR itself",
            )
        p = p / BEST_NAME
    elif not p.exists():
        raise CheckpointError(f"model {text} does not exist", remedy="check the --model path")
    if not os.access(p, os.R_OK) or not p.is_file():
        raise CheckpointError(f"model {text} is not a readable file", remedy="check the path")
    if CHECKPOINT_NAME.match(p.name):
        raise CheckpointError(
            f"model {text} is a training checkpoint (weights and optimizer state, no "
            "preprocessing)",
            remedy=f"pass the {BEST_NAME} of the same run (in its --checkpoint-dir or --out)",
        )
    return p.absolute()


def read_payload(path: Path, data: bytes | None = None) -> dict[str, Any]:
    """The ``best.pt`` payload (``weights_only``: tensors and plain data, no code runs)."""
    import torch

    raw = data if data is not None else path.read_bytes()
    if not zipfile.is_zipfile(io.BytesIO(raw)):
        raise CheckpointError(
            f"model {path} is not a PyTorch checkpoint file",
            remedy=f"pass the {BEST_NAME} that `gpuspark train` wrote",
        )
    try:
        payload = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch and pickle raise many types for a file that is not one
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise CheckpointError(
            f"model {path} cannot be read as a checkpoint ({type(exc).__name__}: {first})",
            remedy=f"pass the {BEST_NAME} that `gpuspark train` wrote",
        ) from None
    if not isinstance(payload, dict) or "model" not in payload or "recipe" not in payload:
        raise CheckpointError(
            f"model {path} is not a gpuspark best.pt (no recipe and model fields)",
            remedy=f"pass the {BEST_NAME} that `gpuspark train` wrote",
        )
    return payload


def load_model(model: str | os.PathLike[str]) -> LoadedModel:
    """Read and check the ``best.pt`` that ``model`` names (see the module docstring);
    raises a one-line :class:`CheckpointError` or :class:`RecipeError`."""
    path = checkpoint_path(model)
    mtime_ns = path.stat().st_mtime_ns
    data = path.read_bytes()
    payload = read_payload(path, data)
    recipe = str(payload["recipe"])
    if recipe not in SERVED_RECIPES:
        raise RecipeError(
            f"model {path} is of recipe {recipe!r}; predict serves {', '.join(SERVED_RECIPES)}",
            remedy="pass a checkpoint of `gpuspark train tabular`",
        )
    serving = _serving(path, payload)
    hidden, layers = _shape(path, payload["model"], serving)
    return LoadedModel(
        path=str(path),
        mtime_ns=mtime_ns,
        recipe=recipe,
        serving=serving,
        hidden=hidden,
        layers=layers,
        epoch=payload.get("epoch"),
        scores=dict(payload.get("scores") or {}),
        data=data,
    )


def _serving(path: Path, payload: dict[str, Any]) -> TabularServing:
    """The preprocessing the checkpoint records, else its training dataset's manifest's."""
    lineage = payload.get("dataset")
    if isinstance(lineage, Mapping) and isinstance(lineage.get("extra"), Mapping):
        tab, dataset = lineage["extra"].get("tabular"), lineage.get("path")
    else:
        tab, dataset = _manifest_extra(path, payload)
    try:
        if not isinstance(tab, Mapping):
            raise KeyError("tabular")
        return TabularServing.from_extra(tab, dataset)
    except (KeyError, TypeError) as exc:
        raise CheckpointError(
            f"model {path}: its training dataset's preprocessing lacks {exc}",
            remedy=_RETRAIN,
        ) from None


def _manifest_extra(path: Path, payload: dict[str, Any]) -> tuple[Any, str | None]:
    """A ``best.pt`` of a version that did not record the preprocessing: its dataset's."""
    config = payload.get("config")
    data = (config.get("dataset") or {}).get("data") if isinstance(config, Mapping) else None
    if not data:
        raise CheckpointError(
            f"model {path} records neither its preprocessing nor its training dataset",
            remedy=_RETRAIN,
        )
    try:
        manifest = fmt.load_manifest(data)
    except GpusparkError as exc:
        raise CheckpointError(
            f"model {path} does not record its preprocessing and its training dataset {data} "
            f"cannot be read ({exc.message})",
            remedy=f"restore {data}, or {_RETRAIN}",
        ) from None
    return manifest.extra.get("tabular"), str(data)


@dataclass(frozen=True)
class _NetShape:
    """What a ``TabularNet`` state dict says about its network."""

    numeric: int
    vocab: tuple[int, ...]
    outputs: int
    hidden: int
    layers: int


def _net_shape(path: Path | str, state: Mapping[str, Any]) -> _NetShape:
    linear = sorted(
        int(k.split(".")[1]) for k in state if k.startswith("mlp.") and k.endswith(".weight")
    )
    if "mean" not in state or not linear:
        raise CheckpointError(f"model {path} holds no tabular network", remedy=_RETRAIN)
    embeddings = len({k.split(".")[1] for k in state if k.startswith("embeddings.")})
    return _NetShape(
        numeric=int(state["mean"].shape[0]),
        vocab=tuple(int(state[f"embeddings.{i}.weight"].shape[0]) - 1 for i in range(embeddings)),
        outputs=int(state[f"mlp.{linear[-1]}.weight"].shape[0]),
        hidden=int(state[f"mlp.{linear[0]}.weight"].shape[0]) if len(linear) > 1 else 1,
        layers=len(linear) - 1,
    )


def _shape(path: Path, state: Mapping[str, Any], serving: TabularServing) -> tuple[int, int]:
    """``(hidden, layers)`` of the network in ``state``, after checking that it reads the
    columns ``serving`` names and gives one output per label value."""
    shape = _net_shape(path, state)
    recorded = tuple(len(v) for v in serving.vocab)
    problems = []
    if shape.numeric != len(serving.numeric):
        problems.append(f"{shape.numeric} numeric inputs, {len(serving.numeric)} numeric columns")
    if shape.vocab != recorded:
        problems.append(f"vocabularies of {list(shape.vocab)}, {list(recorded)} recorded")
    if shape.outputs != len(serving.label_values):
        problems.append(f"{shape.outputs} outputs, {len(serving.label_values)} label values")
    if problems:
        raise CheckpointError(
            f"model {path}: its network does not match its preprocessing ({'; '.join(problems)})",
            remedy=_RETRAIN,
        )
    return shape.hidden, shape.layers


def build_network(data: bytes, path: str) -> Any:
    """The network of the ``best.pt`` bytes ``data`` (read from ``path``), in eval mode on
    the CPU."""
    state = read_payload(Path(path), data)["model"]
    shape = _net_shape(path, state)
    net = TabularNet(
        state["mean"].tolist(),
        state["std"].tolist(),
        shape.vocab,
        shape.outputs,
        hidden=shape.hidden,
        layers=shape.layers,
        dropout=0.0,
    )
    net.load_state_dict(state)
    return net.eval()
