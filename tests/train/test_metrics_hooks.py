"""Per-step hooks of the training loop (``FitConfig.hooks``): a hook sees every optimizer
step's figures and the slower samples; the default hook is the rank's Prometheus exporter,
and ``metrics_port=0`` turns it off. One real gloo rank in its own process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

_SCRIPT = textwrap.dedent(
    """
    import json, os, socket, sys
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    import torch
    from gpuspark.train import prepare
    from gpuspark.train.loop import FitConfig, _hooks, fit
    from gpuspark.train.prometheus import PrometheusHook

    class Recorder:
        def __init__(self):
            self.steps, self.samples = [], 0
        def step(self, f):
            self.steps.append({"samples": f.samples, "epoch": f.epoch, "loss": f.loss,
                               "phases": sorted(f.phases), "seconds": f.seconds})
        def sample(self, loader, device, cuda):
            self.samples += 1

    class Broken:
        def step(self, f):
            raise RuntimeError("a broken hook")
        def sample(self, loader, device, cuda):
            raise RuntimeError("a broken hook")

    torch.manual_seed(0)
    xs = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(5)]
    m = prepare(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    rec = Recorder()
    hist = fit(m, opt, torch.nn.functional.cross_entropy, xs,
               config=FitConfig(epochs=2, log=None, hooks=[rec, Broken()]))
    off = _hooks(FitConfig(metrics_port=0, log=None), m)
    s = socket.socket(); s.bind(("127.0.0.1", 0)); free = s.getsockname()[1]; s.close()
    default = _hooks(FitConfig(metrics_port=free, log=None), m)
    print(json.dumps({"steps": rec.steps, "samples": rec.samples, "epochs": len(hist),
                      "off": len(off), "default": [type(h).__name__ for h in default]}))
    """
)


def test_hooks_see_every_step_and_prometheus_is_the_default(tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["epochs"] == 2
    steps = out["steps"]
    assert len(steps) == 10  # 5 batches x 2 epochs, one figure per optimizer step
    assert [s["epoch"] for s in steps] == [0] * 5 + [1] * 5
    assert all(s["samples"] == 8 and s["seconds"] > 0 for s in steps)
    assert steps[0]["phases"] == ["comm", "compute", "data_wait", "optimizer"]
    assert out["samples"] >= 2  # at least once per epoch (its end)
    assert "a broken hook" in proc.stderr  # logged, and training went on
    assert out["off"] == 0 and out["default"] == ["PrometheusHook"]
