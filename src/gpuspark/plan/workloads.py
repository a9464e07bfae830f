"""Models the planner knows: parameter tensors (shapes), training FLOPs per sample, and a
published per-GPU throughput that sets the default compute efficiency.

Catalogue shapes are generated from the architectures' definitions (no torch needed):
ResNet-50 v1.5 as in torchvision (25,557,032 parameters) and BERT-large (24 layers, hidden
1024, 30,522-token vocabulary, about 335M parameters). The recipes' networks (``resnet3d``,
``resnet2d``) are built (ResNets of MONAI's layout) and measured with torch's FLOP counter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuspark.errors import PlanError, did_you_mean
from gpuspark.plan.checks import PLAN_RANGES

__all__ = [
    "CATALOGUE",
    "RECIPE_WORKLOADS",
    "Reference",
    "Workload",
    "bert_large",
    "custom_workload",
    "find_workload",
    "recipe_workload",
    "resnet50",
    "workload_names",
]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Reference:
    """A published training throughput: ``samples_per_s`` per GPU on ``gpu`` in ``dtype``."""

    gpu: str
    dtype: str
    samples_per_s: float
    source: str


@dataclass(frozen=True)
class Workload:
    """What one training sample costs and what the gradients look like."""

    name: str
    shapes: tuple[Shape, ...]
    """Parameter shapes in ``model.parameters()`` order (backward produces them reversed)."""
    flops_per_sample: float
    """Forward + backward FLOPs of one sample (1 multiply-add = 2 FLOPs)."""
    reference: Reference | None = None
    decode_format: str = "none"
    """``jpeg``, ``volume`` or ``none``: which decode rate feeds the input-pipeline check."""
    samples_per_epoch: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def params(self) -> int:
        """Number of parameters."""
        return sum(math.prod(s) for s in self.shapes)


def _conv(out: int, inp: int, k: int) -> list[Shape]:
    return [(out, inp, k, k)]


def _bn(ch: int) -> list[Shape]:
    return [(ch,), (ch,)]


def _resnet50_layers() -> tuple[list[Shape], float]:
    """torchvision ResNet-50 v1.5 shapes and forward multiply-adds at 224x224."""
    shapes: list[Shape] = [*_conv(64, 3, 7), *_bn(64)]
    macs = 64 * 3 * 49 * 112 * 112
    inp, res = 64, 56
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            out_res = res // s
            shapes += [*_conv(width, inp, 1), *_bn(width), *_conv(width, width, 3), *_bn(width)]
            shapes += [*_conv(4 * width, width, 1), *_bn(4 * width)]
            macs += width * inp * res * res + width * width * 9 * out_res**2
            macs += 4 * width * width * out_res**2
            if i == 0:
                shapes += [*_conv(4 * width, inp, 1), *_bn(4 * width)]
                macs += 4 * width * inp * out_res**2
            inp, res = 4 * width, out_res
    shapes += [(1000, 2048), (1000,)]
    macs += 1000 * 2048
    return shapes, float(macs)


def resnet50() -> Workload:
    """ResNet-50 v1.5 on 224x224 ImageNet images; reference: NVIDIA's A100 80GB PyTorch AMP
    figure (2,470 images/s on 1 GPU)."""
    shapes, macs = _resnet50_layers()
    return Workload(
        name="resnet50",
        shapes=tuple(shapes),
        flops_per_sample=3 * 2 * macs,
        reference=Reference(
            gpu="A100-SXM4-80GB",
            dtype="bf16",
            samples_per_s=2470.0,
            source="https://github.com/NVIDIA/DeepLearningExamples/blob/master/PyTorch/"
            "Classification/ConvNets/resnet50v1.5/README.md (DGX A100 80GB, 1 GPU, mixed "
            "precision, pytorch-21.03)",
        ),
        decode_format="jpeg",
        samples_per_epoch=1_281_167,
        notes=(f"{macs / 1e9:.2f} G multiply-adds forward per image; x2 FLOPs, x3 fwd+bwd",),
    )


def bert_large(seq_len: int = 512) -> Workload:
    """BERT-large (24 layers, hidden 1024, 16 heads, FFN 4096) on ``seq_len``-token sequences.

    FLOPs per sequence: 6 x non-embedding parameters x tokens + the attention term
    6 x layers x seq_len x hidden per token (Kaplan et al. 2020, arXiv:2001.08361, table 1).
    No published per-GPU reference is used: the efficiency is the planner's default.
    """
    hidden, layers, ffn = 1024, 24, 4096
    shapes: list[Shape] = [(30522, hidden), (512, hidden), (2, hidden), (hidden,), (hidden,)]
    per_layer: list[Shape] = []
    for _ in range(4):  # query, key, value, attention output
        per_layer += [(hidden, hidden), (hidden,)]
    per_layer += [(hidden,), (hidden,), (ffn, hidden), (ffn,), (hidden, ffn), (hidden,)]
    per_layer += [(hidden,), (hidden,)]
    shapes += per_layer * layers
    shapes += [(hidden, hidden), (hidden,)]
    non_embedding = sum(math.prod(s) for s in per_layer) * layers
    flops = 6 * non_embedding * seq_len + 6 * layers * seq_len * hidden * seq_len
    return Workload(
        name="bert-large",
        shapes=tuple(shapes),
        flops_per_sample=float(flops),
        decode_format="none",
        notes=(f"one sample = one {seq_len}-token sequence",),
    )


def recipe_workload(
    recipe: str,
    input_shape: Sequence[int] | None = None,
    options: dict[str, Any] | None = None,
    num_classes: int = 2,
) -> Workload:
    """A gpuspark recipe's network (built on CPU) with FLOPs counted by torch's
    ``FlopCounterMode`` over one forward + backward of one sample of ``input_shape``
    (default: ``1x64x64x64`` volumes for ``resnet3d``, ``3x224x224`` images for ``resnet2d``)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from gpuspark.train.recipes import RecipeConfig, build_model, get_recipe

    spec = get_recipe(recipe)
    shape = tuple(input_shape or spec.sample_shape)
    if not shape:
        raise PlanError(
            f"recipe {recipe!r} has no default input shape to count FLOPs on",
            remedy="pass the input shape (--input C,D,H,W)",
        )
    cfg = RecipeConfig(data="-", **(options or {}))
    net = build_model(recipe, cfg, num_classes)
    x = torch.zeros((2, *shape))  # 2 samples: batch norm in training mode needs more than 1
    counter = FlopCounterMode(display=False)
    with counter:
        net(x).sum().backward()
    return Workload(
        name=recipe,
        shapes=tuple(tuple(p.shape) for p in net.parameters()),
        flops_per_sample=float(counter.get_total_flops()) / 2,
        decode_format=spec.input_kind or "jpeg",
        notes=(f"input {'x'.join(map(str, shape))}, options {options or {}}",),
    )


def custom_workload(params: int, flops_per_sample: float, name: str = "custom") -> Workload:
    """A model known only by its parameter count: one flat tensor (PowerSGD cannot be planned
    without shapes: it is refused for custom workloads by :func:`gpuspark.plan.predict`)."""
    remedy = "pass the model's parameter count and forward+backward FLOPs per sample"
    PLAN_RANGES["params"].check(params, remedy)
    PLAN_RANGES["flops_per_sample"].check(flops_per_sample, remedy)
    return Workload(name=name, shapes=((int(params),),), flops_per_sample=float(flops_per_sample))


CATALOGUE = {"resnet50": resnet50, "bert-large": bert_large}
RECIPE_WORKLOADS = ("resnet3d", "resnet2d")
"""The recipes the planner builds and the calibration probes: ResNets on volumes and
images (see :data:`gpuspark.plan.probe_checks.DOWNSAMPLING`)."""


def workload_names() -> tuple[str, ...]:
    """Model names ``--model`` accepts."""
    return (*CATALOGUE, *RECIPE_WORKLOADS)


def find_workload(name: str) -> Workload:
    """The catalogue model or recipe ``name``; an unknown name raises with the choices."""
    if name in CATALOGUE:
        return CATALOGUE[name]()
    if name in RECIPE_WORKLOADS:
        return recipe_workload(name)
    names = workload_names()
    raise PlanError(
        f"--model {name!r} is unknown{did_you_mean(name, names)}",
        remedy="use one of: " + ", ".join(names) + ", or give --params and --flops-per-sample",
    )
