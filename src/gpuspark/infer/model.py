"""A gpuspark checkpoint as batch prediction needs it: the file read once
(:class:`CheckpointFile`), the training dataset's lineage it records, and for a ``tabular``
checkpoint the network and how its inputs were encoded (:class:`TabularServing`), read from
the ``best.pt`` alone. (A checkpoint of a recipe that reads DICOM volumes:
:mod:`gpuspark.infer.volume`.)

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
import shlex
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark.data import format as fmt
from gpuspark.errors import CheckpointError, GpusparkError, RecipeError
from gpuspark.storage import Location
from gpuspark.train.checkpoint_dir import CHECKPOINT_NAME
from gpuspark.train.recipes.registry import get_recipe, recipe_names
from gpuspark.train.recipes.tabular_model import TabularNet  # imports torch

__all__ = [
    "BEST_NAME",
    "EXPORT_FORMATS",
    "SERVED_RECIPES",
    "SERVING_FILE",
    "CheckpointFile",
    "LoadedModel",
    "TabularServing",
    "build_network",
    "category_key",
    "checkpoint_path",
    "lineage_extra",
    "load_model",
    "model_format",
    "read_checkpoint",
    "read_payload",
    "recipe_input",
    "volume_recipes",
]

BEST_NAME = "best.pt"
SERVED_RECIPES = ("tabular",)
"""The recipes whose checkpoints score tables (:func:`gpuspark.infer.predict`)."""
SERVING_FILE = "gpuspark.json"
"""The extra file of a TorchScript or ``torch.export`` model file that holds the recipe and
the training dataset's lineage (written by :func:`gpuspark.infer.export.export_model`)."""
EXPORT_FORMATS = ("torchscript", "export")
"""Model files besides a ``best.pt``: ``torch.jit.save`` and ``torch.export.save`` (.pt2)."""
_EXPORT_REMEDY = "export it from a tabular best.pt with gpuspark.infer.export_model(BEST, FILE)"
_RETRAIN = "train it again with this gpuspark (`gpuspark train tabular ... --checkpoint-dir DIR`)"
_RETRAIN_ANY = "train it again with this gpuspark (`gpuspark train ... --checkpoint-dir DIR`)"


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


@dataclass(frozen=True)
class CheckpointFile:
    """A ``best.pt`` read once: where it is, its bytes (what the tasks build the network
    from) and its payload (``weights_only``)."""

    path: Location
    mtime_ns: int
    data: bytes = field(repr=False)
    payload: dict[str, Any] = field(repr=False)
    format: str = "checkpoint"
    """``checkpoint`` (a ``best.pt``), ``torchscript`` or ``export`` (:data:`EXPORT_FORMATS`:
    then ``payload`` holds the recipe and lineage of :data:`SERVING_FILE`, no weights)."""

    @property
    def recipe(self) -> str:
        """The recipe that trained it."""
        return str(self.payload["recipe"])

    @property
    def key(self) -> tuple[str, int]:
        """The path and modification time: the key of the per-worker model cache."""
        return str(self.path), self.mtime_ns


def category_key(value: Any) -> str:
    """A vocabulary value as the prep job matches it: Spark's cast to text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def checkpoint_path(model: str | os.PathLike[str]) -> Location:
    """The ``best.pt`` that ``model`` names (the file, or the run directory holding it): a
    local path, or a URL (``s3://bucket/run``) of a run that ``train --checkpoint-dir``
    wrote there."""
    text = os.fspath(model)
    p = storage.as_path(os.path.expanduser(text) if not storage.is_url(text) else text)
    if storage.is_dir(p):
        if not storage.is_file(p / BEST_NAME):
            raise CheckpointError(
                f"model {text} is a directory without {BEST_NAME}",
                remedy="pass the best.pt a `gpuspark train --checkpoint-dir DIR` run wrote, "
                "or DIR itself",
            )
        p = p / BEST_NAME
    elif not storage.is_file(p):
        raise CheckpointError(f"model {text} does not exist", remedy="check the --model path")
    if isinstance(p, Path) and not os.access(p, os.R_OK):
        raise CheckpointError(f"model {text} is not a readable file", remedy="check the path")
    if CHECKPOINT_NAME.match(p.name):
        raise CheckpointError(
            f"model {text} is a training checkpoint (weights and optimizer state, no "
            "preprocessing)",
            remedy=f"pass the {BEST_NAME} of the same run (in its --checkpoint-dir or --out)",
        )
    return p.absolute() if isinstance(p, Path) else p


def read_payload(path: Location, data: bytes | None = None) -> dict[str, Any]:
    """The ``best.pt`` payload (``weights_only``: tensors and plain data, no code runs)."""
    import torch

    raw = data if data is not None else storage.read_bytes(path)
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


def read_checkpoint(model: str | os.PathLike[str] | CheckpointFile) -> CheckpointFile:
    """The ``best.pt`` that ``model`` names (the file or its run folder), read and checked to
    be a gpuspark checkpoint; a :class:`CheckpointFile` is returned as it is."""
    if isinstance(model, CheckpointFile):
        return model
    path = checkpoint_path(model)
    data = storage.read_bytes(path)
    mtime_ns = path.stat().st_mtime_ns if isinstance(path, Path) else _content_key(data)
    kind = model_format(data)
    if kind == "checkpoint":
        return CheckpointFile(path, mtime_ns, data, read_payload(path, data))
    return CheckpointFile(path, mtime_ns, data, _exported_payload(path, data, kind), kind)


def _content_key(data: bytes) -> int:
    """A stand-in for a remote file's modification time in the per-worker model cache's key:
    a number from its content (an object store keeps whole seconds only)."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def model_format(data: bytes) -> str:
    """What a model file's bytes hold: ``torchscript`` (``torch.jit.save``: a ``code/``
    folder), ``export`` (``torch.export.save``: an ``archive_format`` entry) or
    ``checkpoint`` (anything else; :func:`read_payload` checks it)."""
    try:
        names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    except zipfile.BadZipFile:
        return "checkpoint"
    if any("/code/" in n for n in names):
        return "torchscript"
    if any(n.endswith("/archive_format") for n in names):
        return "export"
    return "checkpoint"


def _exported_payload(path: Location, data: bytes, kind: str) -> dict[str, Any]:
    """The recipe and lineage of a TorchScript or ``torch.export`` file (its
    :data:`SERVING_FILE`)."""
    import json

    archive = zipfile.ZipFile(io.BytesIO(data))
    found = [n for n in archive.namelist() if n.endswith(f"/extra/{SERVING_FILE}")]
    what = "TorchScript" if kind == "torchscript" else "torch.export"
    if not found:
        raise CheckpointError(
            f"model {path} is a {what} file without gpuspark's preprocessing ({SERVING_FILE})",
            remedy=_EXPORT_REMEDY,
        )
    try:
        meta = json.loads(archive.read(found[0]))
        return {"recipe": str(meta["recipe"]), "dataset": dict(meta["dataset"]), "format": kind}
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(
            f"model {path}: its {SERVING_FILE} cannot be read ({type(exc).__name__}: {exc})",
            remedy=_EXPORT_REMEDY,
        ) from None


def recipe_input(recipe: str) -> str:
    """What the registered recipe ``recipe`` reads (its ``input_kind``: ``"table"``,
    ``"volume"``, ...); ``""`` for a recipe this process does not know."""
    try:
        return get_recipe(recipe).input_kind
    except RecipeError:
        return ""


def volume_recipes() -> tuple[str, ...]:
    """The registered recipes trained on ``gpuspark prep dicom`` volumes (``resnet3d``)."""
    return tuple(n for n in recipe_names() if recipe_input(n) == "volume")


def load_model(model: str | os.PathLike[str] | CheckpointFile) -> LoadedModel:
    """Read and check the ``tabular`` ``best.pt`` that ``model`` names (see the module
    docstring); raises a one-line :class:`CheckpointError` or :class:`RecipeError`."""
    ckpt = read_checkpoint(model)
    path, payload, recipe = ckpt.path, ckpt.payload, ckpt.recipe
    if recipe not in SERVED_RECIPES:
        if recipe_input(recipe) == "volume":
            raise RecipeError(
                f"model {path} is of recipe {recipe!r}, which scores DICOM studies, not tables",
                remedy="score DICOM studies with `gpuspark predict dicom STUDIES --model "
                f"{shlex.quote(str(path))}`",
            )
        raise RecipeError(
            f"model {path} is of recipe {recipe!r}; predict serves {', '.join(SERVED_RECIPES)} "
            f"(tables) and {', '.join(volume_recipes())} (DICOM studies)",
            remedy="pass a checkpoint of `gpuspark train tabular`",
        )
    serving = _serving(path, payload)
    if ckpt.format == "checkpoint":
        hidden, layers = _shape(path, payload["model"], serving)
    else:
        hidden, layers = _check_exported(ckpt, serving)
    return LoadedModel(
        path=str(path),
        mtime_ns=ckpt.mtime_ns,
        recipe=recipe,
        serving=serving,
        hidden=hidden,
        layers=layers,
        epoch=payload.get("epoch"),
        scores=dict(payload.get("scores") or {}),
        data=ckpt.data,
    )


def lineage_extra(path: Location, payload: dict[str, Any]) -> tuple[Mapping[str, Any], str | None]:
    """The training dataset's ``manifest.extra`` as the checkpoint records it
    (``payload["dataset"]``, see :func:`gpuspark.train.recipes.rank.dataset_lineage`) and
    the dataset's path; for a ``best.pt`` of a version that did not record it, the manifest
    of the dataset it names, if that is still there."""
    lineage = payload.get("dataset")
    if isinstance(lineage, Mapping) and isinstance(lineage.get("extra"), Mapping):
        path_text = lineage.get("path")
        return lineage["extra"], str(path_text) if path_text is not None else None
    return _manifest_extra(path, payload)


def _serving(path: Location, payload: dict[str, Any]) -> TabularServing:
    """The preprocessing the checkpoint records, else its training dataset's manifest's."""
    extra, dataset = lineage_extra(path, payload)
    tab = extra.get("tabular")
    try:
        if not isinstance(tab, Mapping):
            raise KeyError("tabular")
        return TabularServing.from_extra(tab, dataset)
    except (KeyError, TypeError) as exc:
        raise CheckpointError(
            f"model {path}: its training dataset's preprocessing lacks {exc}",
            remedy=_RETRAIN,
        ) from None


def _manifest_extra(
    path: Location, payload: dict[str, Any]
) -> tuple[Mapping[str, Any], str | None]:
    """A ``best.pt`` of a version that did not record the preprocessing: its dataset's."""
    config = payload.get("config")
    data = (config.get("dataset") or {}).get("data") if isinstance(config, Mapping) else None
    if not data:
        raise CheckpointError(
            f"model {path} records neither its preprocessing nor its training dataset",
            remedy=_RETRAIN_ANY,
        )
    try:
        manifest = fmt.load_manifest(data)
    except GpusparkError as exc:
        raise CheckpointError(
            f"model {path} does not record its preprocessing and its training dataset {data} "
            f"cannot be read ({exc.message})",
            remedy=f"restore {data}, or {_RETRAIN_ANY}",
        ) from None
    return manifest.extra, str(data)


@dataclass(frozen=True)
class _NetShape:
    """What a ``TabularNet`` state dict says about its network."""

    numeric: int
    vocab: tuple[int, ...]
    outputs: int
    hidden: int
    layers: int


def _net_shape(path: Location | str, state: Mapping[str, Any]) -> _NetShape:
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


def _shape(path: Location, state: Mapping[str, Any], serving: TabularServing) -> tuple[int, int]:
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


def _check_exported(ckpt: CheckpointFile, serving: TabularServing) -> tuple[int, int]:
    """An exported network run on two rows of the width ``serving`` encodes: one output per
    label value, else a one-line error. Its shape is not known: ``(0, 0)``."""
    import torch

    width = len(serving.features)
    try:
        net = build_network(ckpt.data, str(ckpt.path))
        with torch.inference_mode():
            shape = tuple(net(torch.zeros(2, width)).shape)
    except Exception as exc:  # torch raises many types for a model that cannot run
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        shape, why = (), f"{type(exc).__name__}: {first}"
    else:
        why = f"output shape {list(shape)}"
    if shape != (2, len(serving.label_values)):
        raise CheckpointError(
            f"model {ckpt.path} does not score rows of its {width} encoded columns into "
            f"{len(serving.label_values)} classes ({why})",
            remedy=_EXPORT_REMEDY,
        )
    return 0, 0


def build_network(data: bytes, path: str) -> Any:
    """The network of the model file bytes ``data`` (read from ``path``), in eval mode on
    the CPU: a ``best.pt``'s ``TabularNet``, a TorchScript module or the module of a
    ``torch.export`` program."""
    import torch

    kind = model_format(data)
    if kind == "torchscript":
        return torch.jit.load(io.BytesIO(data), map_location="cpu").eval()
    if kind == "export":
        return torch.export.load(io.BytesIO(data)).module()  # exported in eval mode
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
