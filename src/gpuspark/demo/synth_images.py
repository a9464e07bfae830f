"""A synthetic image-folder data set (``synth_images``): one shape and hue per class."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from typing import Any

from gpuspark import storage
from gpuspark._util.extras import require
from gpuspark.demo.staging import commit_dir, staging_dir

__all__ = ["ImageSetSummary", "synth_images"]


@dataclass(frozen=True)
class ImageSetSummary:
    """What ``synth_images`` wrote."""

    path: str
    classes: list[str]
    images: int
    bytes: int


_SHAPES = ("circle", "square", "triangle", "cross", "ring", "bars", "diamond", "dots")


def _draw_image(cls: int, k: int, rng: Any) -> Any:
    import numpy as np

    Image = require("PIL.Image", "images", "drawing synthetic images")
    ImageDraw = require("PIL.ImageDraw", "images", "drawing synthetic images")

    w, h = int(rng.integers(64, 161)), int(rng.integers(64, 161))
    bg = tuple(int(v) for v in rng.integers(0, 90, size=3))
    img = Image.new("RGB", (w, h), bg)
    d = ImageDraw.Draw(img)
    hue = (cls * 360 // max(1, k)) % 360
    color = _hsv(hue, 0.8 + 0.2 * rng.random(), 0.75 + 0.25 * rng.random())
    s = min(w, h)
    cx, cy = w / 2 + rng.uniform(-0.1, 0.1) * s, h / 2 + rng.uniform(-0.1, 0.1) * s
    r = s * rng.uniform(0.25, 0.4)
    shape = _SHAPES[cls % len(_SHAPES)]
    box = (cx - r, cy - r, cx + r, cy + r)
    if shape == "circle":
        d.ellipse(box, fill=color)
    elif shape == "square":
        d.rectangle(box, fill=color)
    elif shape == "triangle":
        d.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=color)
    elif shape == "cross":
        d.rectangle((cx - r, cy - r / 4, cx + r, cy + r / 4), fill=color)
        d.rectangle((cx - r / 4, cy - r, cx + r / 4, cy + r), fill=color)
    elif shape == "ring":
        d.ellipse(box, outline=color, width=max(2, int(r / 3)))
    elif shape == "bars":
        for i in range(4):
            x0 = cx - r + i * r / 2
            d.rectangle((x0, cy - r, x0 + r / 4, cy + r), fill=color)
    elif shape == "diamond":
        d.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=color)
    else:
        for i in range(3):
            for j in range(3):
                px, py = cx - r + i * r, cy - r + j * r
                d.ellipse((px - r / 5, py - r / 5, px + r / 5, py + r / 5), fill=color)
    arr = np.asarray(img, dtype=np.int16) + rng.integers(-12, 13, size=(h, w, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def _hsv(h: float, s: float, v: float) -> tuple[int, int, int]:
    import colorsys

    r, g, b = colorsys.hsv_to_rgb(h / 360.0, s, v)
    return int(r * 255), int(g * 255), int(b * 255)


def synth_images(
    dst: str | os.PathLike[str],
    classes: int = 4,
    per_class: int = 25,
    seed: int = 0,
    *,
    png_every: int = 10,
    overwrite: bool = False,
) -> ImageSetSummary:
    """Write an image-folder data set ``dst/<class>/<name>.jpg`` (every ``png_every``-th a PNG).

    Class ``k`` draws its own shape in its own hue on a noisy background; sizes vary from
    64 to 160 pixels per side so that resizing matters. Deterministic per seed.
    """
    if classes < 1 or per_class < 1:
        raise ValueError(f"classes and per_class must be >= 1, got: {classes}, {per_class}")
    import numpy as np

    root = storage.as_path(dst)
    tmp = staging_dir(dst, overwrite)
    names = [f"class_{c:02d}" for c in range(classes)]
    total = 0
    try:
        for c, name in enumerate(names):
            (tmp / name).mkdir()
            for i in range(per_class):
                rng = np.random.default_rng([seed, c, i])
                img = _draw_image(c, classes, rng)
                h = hashlib.sha256(f"{seed}/{c}/{i}".encode()).hexdigest()[:12]
                png = png_every > 0 and i % png_every == png_every - 1
                path = tmp / name / (f"{h}.png" if png else f"{h}.jpg")
                img.save(path, format="PNG" if png else "JPEG", quality=90)
                total += path.stat().st_size
        commit_dir(tmp, dst, "datasets synth-images")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ImageSetSummary(path=str(root), classes=names, images=classes * per_class, bytes=total)
