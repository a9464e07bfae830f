"""Every option of every command, given a value of the wrong type, an empty value or one out of
its range (hardening issue: the generated fuzz test). Each must end with exit code 1 or 2, one
line on stderr (``error: ...``) and no traceback, before any work starts.

The commands run in-process through :func:`gpuspark.cli.main.main`: a walk over the click
command tree finds every option and its type, so a new option is fuzzed without a line here.
Work that would start (a child process: Spark's JVM, Prometheus, a rank) raises
``Started`` (tests/_no_work.py), which no command can catch as an error, so a value that
slips through fails its case instead of starting anything. The other arguments are valid,
so the fuzzed value is what is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest

from _no_work import Started, refuse_work  # tests/_no_work.py
from gpuspark.cli.main import EMPTY_ALLOWED, INFINITE_ALLOWED, main

# The other arguments of each command: valid, so the fuzzed option decides. {SPEC} a valid
# spec, {SRC} a folder, {DST} a new folder, {SCRIPT} a script, {LOG} a log file.
BASE: dict[str, list[str]] = {
    "init": ["{DST}.toml"],
    "validate": ["{SPEC}"],
    "launch": ["{SCRIPT}"],
    "train": ["tabular", "--data", "{SRC}"],
    "top": ["--once"],
    "demo": [],
    "render spark": ["{SPEC}"],
    "render monitoring": ["{SPEC}"],
    "render yarn": ["{SPEC}"],
    "render kueue": ["{SPEC}"],
    "render volcano": ["{SPEC}"],
    "render k8s": ["{SPEC}"],
    "render standalone": ["--spec", "{SPEC}"],
    "predict": ["{SRC}", "--model", "{SRC}", "-o", "{DST}"],
    "cluster up": [],
    "cluster status": [],
    "cluster down": [],
    "shards inspect": ["{SRC}"],
    "shards verify": ["{SRC}"],
    "datasets synth-ct": ["{DST}"],
    "datasets synth-images": ["{DST}"],
    "datasets synth-risk": ["{DST}"],
    "datasets pydoc-text": ["{DST}"],
    "prep images": ["{SRC}", "{DST}"],
    "prep dicom": ["{SRC}", "{DST}"],
    "prep parquet": ["{SRC}", "{DST}", "--label", "y"],
    "prep text": ["{SRC}", "{DST}"],
    "monitor up": [],
    "monitor status": [],
    "monitor down": [],
    "doctor": [],
    "doctor logs": ["{LOG}"],
    "quota status": [],
    "quota why": [],
    "plan": [],
    "plan calibrate": [],
}

# Options for which a negative number is a meaning, not a mistake.
NEGATIVE_OK = {"--seed"}


def _leaf_commands() -> list[tuple[str, Any]]:
    import typer.main

    from gpuspark.cli.main import app

    out: list[tuple[str, Any]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        if path:
            out.append((" ".join(path), cmd))
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def _annotation(param: Any) -> Any:
    """The option's value type, ``X | None`` unwrapped."""
    ann = param.type_descriptor.annotation
    args = [a for a in get_args(ann) if a is not type(None)]
    return args[0] if len(args) == 1 else ann


def _bad_values(param: Any) -> list[tuple[str, str]]:
    """``(kind, value)`` pairs no command may accept for ``param``."""
    ann = _annotation(param)
    name = next(o for o in param.opts if o.startswith("--"))
    values = [] if name in EMPTY_ALLOWED else [("empty", "")]
    if ann in (int, float):
        values.append(("type", "abc"))
        if name not in NEGATIVE_OK and (param.min is None or param.min >= 0):
            values.append(("range", "-1"))
        if param.max is not None:
            values.append(("range", str(param.max + 1)))
    if ann is float:
        values.append(("range", "nan"))
        values += [] if name in INFINITE_ALLOWED else [("range", "inf")]
    return values


def _cases() -> list[Any]:
    cases = []
    for words, cmd in _leaf_commands():
        if words not in BASE:
            continue  # a group without options of its own; its commands are listed
        for param in cmd.params:
            long = [o for o in param.opts if o.startswith("--")]
            if not long or param.is_flag:
                continue
            if param.opts[0] == "--help" or param.multiple or param.nargs != 1:
                continue
            for kind, value in _bad_values(param):
                case_id = f"{words} {long[0]}={value or '<empty>'}:{kind}"
                cases.append(pytest.param(words, long[0], value, id=case_id))
    return cases


def test_every_command_is_fuzzed() -> None:
    """A new command gets its valid arguments here, so that its options are fuzzed."""
    leaves = {w for w, cmd in _leaf_commands() if not getattr(cmd, "commands", None)}
    assert leaves <= set(BASE), sorted(leaves - set(BASE))
    assert len(_cases()) > 200


def _argv(tmp: Path, words: str, option: str, value: str) -> list[str]:
    from gpuspark.spec import default_spec_text

    spec = tmp / "good.toml"
    spec.write_text(default_spec_text())
    (tmp / "train.py").write_text("print('hello')\n")
    (tmp / "src").mkdir(exist_ok=True)
    (tmp / "driver.log").write_text("26/12/02 10:00:00 INFO SparkContext: Running Spark\n")
    fill = {
        "SPEC": spec,
        "SRC": tmp / "src",
        "DST": tmp / "dst",
        "SCRIPT": tmp / "train.py",
        "LOG": tmp / "driver.log",
    }
    base = [w.format(**{k: str(v) for k, v in fill.items()}) for w in BASE[words]]
    if words == "launch":  # what follows the script is the script's (as with torchrun)
        return [*words.split(), option, value, *base]
    return [*words.split(), *base, option, value]


@pytest.fixture()
def no_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private home and state; starting a child process raises ``Started``."""
    refuse_work(monkeypatch, tmp_path, tmp_path)
    return tmp_path


@pytest.mark.parametrize(("words", "option", "value"), _cases())
def test_bad_value_is_one_line(
    no_work: Path, capsys: pytest.CaptureFixture[str], words: str, option: str, value: str
) -> None:
    argv = _argv(no_work, words, option, value)
    try:
        rc = main(argv)
    except Started as exc:
        pytest.fail(f"{' '.join(argv)}: accepted, and started {exc}")
    err = capsys.readouterr().err
    assert rc in (1, 2), f"{' '.join(argv)}: exit {rc}\n{err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
