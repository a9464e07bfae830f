""":func:`export_model`: a ``tabular`` ``best.pt`` as a TorchScript or ``torch.export`` file
that :func:`~gpuspark.infer.predict` serves like the checkpoint.

The file holds the network (traced with ``torch.jit.trace``, or exported with
``torch.export.export`` with a dynamic batch dimension) and, as the extra file
:data:`~gpuspark.infer.model.SERVING_FILE`, the recipe and the training dataset's lineage: the
encoding of the rows travels with the model, as in ``best.pt``, so the file is scored with
no gpuspark network code and no training dataset.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpuspark.errors import GpusparkError
from gpuspark.infer.model import (
    EXPORT_FORMATS,
    SERVING_FILE,
    build_network,
    lineage_extra,
    load_model,
    read_checkpoint,
)

__all__ = ["export_model"]


def export_model(
    model: str | os.PathLike[str], dst: str | os.PathLike[str], *, kind: str = "torchscript"
) -> Path:
    """Write the ``tabular`` checkpoint ``model`` (a ``best.pt`` or its run folder) to the
    file ``dst`` as ``kind``: ``"torchscript"`` (``torch.jit.save``) or ``"export"``
    (``torch.export.save``, a ``.pt2`` file), with its preprocessing; returns ``dst``.
    The file is written under a temporary name and renamed into place."""
    import torch

    if kind not in EXPORT_FORMATS:
        raise GpusparkError(
            f"kind must be one of {', '.join(EXPORT_FORMATS)}, got {kind!r}",
            remedy="torchscript: torch.jit.save; export: torch.export.save (.pt2)",
        )
    ckpt = read_checkpoint(model)
    loaded = load_model(ckpt)
    extra, dataset = lineage_extra(ckpt.path, ckpt.payload)
    meta = {
        "recipe": loaded.recipe,
        "dataset": {"path": dataset, "extra": {"tabular": extra["tabular"]}},
        "exported_from": loaded.path,
    }
    files = {SERVING_FILE: json.dumps(meta, default=str)}
    net = build_network(loaded.data, loaded.path)
    example = torch.zeros(2, len(loaded.serving.features))
    out = Path(dst).expanduser().absolute()
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        if kind == "torchscript":
            torch.jit.save(torch.jit.trace(net, example), str(tmp), _extra_files=files)
        else:
            batch = torch.export.Dim("batch")
            program = torch.export.export(net, (example,), dynamic_shapes={"x": {0: batch}})
            torch.export.save(program, str(tmp), extra_files=files)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
