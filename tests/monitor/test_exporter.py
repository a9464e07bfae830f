"""The training ranks' exporter: a real tiny fit on CPU, scraped over HTTP, checked by promtool.

The fit runs in a child process (it starts a gloo process group of one); the test process
itself only serves and scrapes exporters of its own for the port and label rules.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuspark.monitor import names as n
from gpuspark.monitor.exporter import serve

ALLOWED_LABELS = {*n.LABELS, "phase", "le", "recipe", "backend", "device"}

_FIT = textwrap.dedent(
    """
    import json, sys, urllib.request
    import numpy as np, torch
    from gpuspark.data.load import ShardDataset
    from gpuspark.data.write import ShardWriter
    from gpuspark.train import prepare
    from gpuspark.train.loop import FitConfig, fit

    root, out = sys.argv[1], sys.argv[2]
    with ShardWriter(root + "/ds", target_shard_bytes=2000) as w:
        for i in range(64):
            w.write({"x": np.full(8, i / 64, dtype=np.float32), "y": i % 2})
    ds = ShardDataset(root + "/ds", decode="raw", seed=0)
    torch.manual_seed(0)
    model = prepare(torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scrapes, urls = {}, []
    def on_step(step):
        if step in (2, 9):
            scrapes[step] = urllib.request.urlopen(urls[0]).read().decode()
    def log(line):
        print(line)
        if line.startswith("metrics: "):
            urls.append(line.split()[1])
    cfg = FitConfig(epochs=2, log=log, team="vision", model_config={"recipe": "tiny"})
    fit(model, opt, torch.nn.functional.cross_entropy, ds.loader(8), dataset=ds,
        config=cfg, on_step=on_step)
    scrapes["end"] = urllib.request.urlopen(urls[0]).read().decode()
    # a second fit in the same process reuses the running exporter
    fit(model, opt, torch.nn.functional.cross_entropy, ds.loader(8), dataset=ds,
        config=FitConfig(epochs=1, log=log, team="vision", model_config={"recipe": "tiny"}))
    scrapes["again"] = urllib.request.urlopen(urls[0]).read().decode()
    json.dump({"urls": urls, "scrapes": scrapes}, open(out, "w"))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(text: str, name: str, **labels: str) -> float:
    found = [
        v
        for (sample, lab), v in _samples(text).items()
        if sample == name and labels.items() <= dict(lab).items()
    ]
    assert len(found) == 1, (name, labels, found)
    return found[0]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("fit")
    (d / "fit.py").write_text(_FIT)
    base = _free_port()
    env = {
        **os.environ,
        "GPUSPARK_METRICS_PORT": str(base),
        "GPUSPARK_MONITOR_DIR": str(d / "monitor"),
        "GPUSPARK_RUN_ID": "run-test-1",
        "OMP_NUM_THREADS": "1",
    }
    env.pop("GPUSPARK_SPEC", None)
    proc = subprocess.run(
        [sys.executable, str(d / "fit.py"), str(d), str(d / "out.json")],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data: dict[str, Any] = json.loads((d / "out.json").read_text())
    data["base"] = base
    return data


def test_fit_serves_every_training_series_with_run_labels(fitted: dict[str, Any]) -> None:
    assert fitted["urls"] == [f"http://127.0.0.1:{fitted['base']}/metrics"]  # announced once
    text = fitted["scrapes"]["end"]
    families = {f.name for f in text_string_to_metric_families(text)}
    cpu_only = set(n.TRAINING_METRICS) - {n.CUDA_ALLOCATED, n.CUDA_RESERVED}
    # the parser drops _total from counter family names
    present = {f if f in families else f + "_total" for f in families}
    missing = {m for m in cpu_only if m not in present and m.removesuffix("_total") not in present}
    assert not missing
    assert not {n.CUDA_ALLOCATED, n.CUDA_RESERVED} & families  # no GPU here: no CUDA series
    for (_name, labels), _v in _samples(text).items():
        lab = dict(labels)
        assert lab["run_id"] == "run-test-1" and lab["rank"] == "0" and lab["team"] == "vision"
        assert lab["host"] == socket.gethostname()
        assert set(lab) <= ALLOWED_LABELS
    info = dict(recipe="tiny", backend="gloo", device="cpu")
    assert _value(text, n.RUN_INFO, **info) == 1.0
    assert _value(text, n.WORLD_SIZE) == 1.0


def test_counters_count_every_step_and_sample(fitted: dict[str, Any]) -> None:
    early, mid, end = (fitted["scrapes"][k] for k in ("2", "9", "end"))
    assert _value(early, n.STEPS) == 2 and _value(mid, n.STEPS) == 9
    assert _value(end, n.STEPS) == 16 and _value(end, n.SAMPLES) == 128  # 64 records x 2 epochs
    assert _value(end, n.STEP_SECONDS + "_count") == 16
    assert _value(end, n.EPOCH) == 1.0
    for name in (n.SAMPLES, n.STEP_SECONDS + "_sum"):
        assert _value(early, name) < _value(mid, name) < _value(end, name)
    for phase in n.PHASES:
        assert _value(early, n.STEP_PHASE, phase=phase) <= _value(end, n.STEP_PHASE, phase=phase)
    assert _value(early, n.STEP_PHASE, phase="compute") < _value(end, n.STEP_PHASE, phase="compute")
    sent, raw = _value(end, n.GRAD_SENT), _value(end, n.GRAD_UNCOMPRESSED)
    assert sent == raw == 16 * (8 * 2 + 2) * 4  # uncompressed fp32 Linear(8, 2) per step
    assert _value(end, n.LOADER_RECORDS) == 128
    assert _value(end, n.LOADER_CORRUPT) == 0
    again = fitted["scrapes"]["again"]
    assert _value(again, n.STEPS) == 24  # the second fit adds to the same series
    assert _value(again, n.LOADER_RECORDS) == 192  # a fresh loader's totals are added


def test_no_label_value_grows_with_steps(fitted: dict[str, Any]) -> None:
    series = [set(_samples(fitted["scrapes"][k])) for k in ("2", "9", "end", "again")]
    assert series[1] == series[2] == series[3]
    assert len(series[2]) < 60  # bounded: the same handful of series at any step


def test_promtool_accepts_a_live_scrape(fitted: dict[str, Any]) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    proc = subprocess.run(
        [promtool, "check", "metrics"],
        input=fitted["scrapes"]["end"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "" and proc.stderr.strip() == ""


# -- serve() in this process ------------------------------------------------------------------


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in ("GPUSPARK_METRICS_PORT", "GPUSPARK_METRICS_HOST", "GPUSPARK_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("GPUSPARK_TEAM", raising=False)
    monkeypatch.delenv("GPUSPARK_RANK_DIR", raising=False)
    monkeypatch.setenv("GPUSPARK_MONITOR_DIR", str(tmp_path / "monitor"))
    from gpuspark.monitor.exporter import current

    running = current()
    if running is not None:
        running.close()


def test_port_zero_serves_nothing(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert serve(0) is None
    monkeypatch.setenv("GPUSPARK_METRICS_PORT", "0")
    assert serve() is None


def test_busy_port_takes_the_next_free_one(clean_env: None) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = int(busy.getsockname()[1])
        rm = serve(taken, run_id="busy")
        assert rm is not None
        try:
            assert rm.port > taken
            body = urllib.request.urlopen(rm.url, timeout=5).read().decode()
            assert 'run_id="busy"' in body
        finally:
            rm.close()


def test_second_serve_returns_it_and_a_new_run_relabels(clean_env: None) -> None:
    first = serve(_free_port(), run_id="one", team="a")
    assert first is not None
    try:
        first.step(4, 0.01, {"compute": 0.01}, loss=1.0)
        assert serve(run_id="one", team="a") is first
        again = serve(run_id="two", team="a")
        assert again is first
        body = urllib.request.urlopen(first.url, timeout=5).read().decode()
        assert 'run_id="two"' in body and 'run_id="one"' not in body
        assert _value(body, n.STEPS) == 0  # a new run starts from zero
    finally:
        first.close()


def test_bad_port_in_the_environment_is_one_line(
    clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuspark.errors import LaunchError

    monkeypatch.setenv("GPUSPARK_METRICS_PORT", "97OO")
    with pytest.raises(LaunchError, match="GPUSPARK_METRICS_PORT='97OO' is not a port number"):
        serve()


def test_team_typo_is_a_one_line_error_with_a_suggestion(tmp_path: Path, capsys: Any) -> None:
    from gpuspark.cli.main import main
    from gpuspark.spec import example_spec

    spec = tmp_path / "cluster.toml"
    spec.write_text(example_spec())
    code = main(
        ["train", "resnet2d", "--data", str(tmp_path), "--spec", str(spec), "--team", "vison"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("error: team 'vison' is not in the spec's [[teams]]")
    assert "(did you mean 'vision'?)" in err and len(err.strip().splitlines()) == 1
