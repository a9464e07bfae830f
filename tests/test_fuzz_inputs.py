"""Fuzz every file-taking option of every command with bad inputs (design principle 5).

Each case runs ``gpuspark`` in-process (:func:`gpuspark.cli.main.main`) in a fresh working
directory, with ``GPUSPARK_STATE_DIR``, ``GPUSPARK_LOG_DIR`` and ``HOME`` inside ``tmp_path``
(no real embedded cluster is found); starting a child process (Spark's JVM, a cluster, a rank)
raises a marker no command can catch, so a case that got as far as starting work fails on that,
not on its input. Every case must end with exit code 1 (one line ``error: ...`` naming the bad
path) or 2 (a usage error), and print no traceback.

Input kinds: ``missing`` (no such path), ``empty`` (an empty file), ``dir`` (a directory where
a file is expected), ``file`` (a text file where a directory is expected), ``binary``
(non-UTF-8 bytes), ``wrong`` (readable text in the wrong format) and ``unreadable``. Tests run
as root in CI and root reads ``chmod 000`` files, so ``unreadable`` is a path below a regular
file (``plain.txt/x``: ENOTDIR on every access), not a permission bit. A FIFO would be
unreadable too but blocks ``open()`` forever, so it is not used.

Not fuzzed: an empty launch script (a valid Python program), a launch script with a syntax
error (the ranks would start and report it), ``--checkpoint-dir`` (owned by the checkpoint
tests) and ``render spark --discovery-script`` (a path on the cluster nodes, never read here).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from _no_work import Started, refuse_work  # tests/_no_work.py

BINARY = bytes(range(128, 256)) * 8 + b"\x00\xff\xfe"

# --------------------------------------------------------------------------- the bad inputs


def _bad(tmp: Path, kind: str, wrong: str = "") -> Path:
    """A bad input of ``kind`` under ``tmp`` (``wrong``: the text of a wrong-format file)."""
    bad = tmp / "bad"
    bad.mkdir(exist_ok=True)
    if kind == "missing":
        return bad / "no-such-input"
    if kind == "empty":
        (bad / "empty.txt").write_bytes(b"")
        return bad / "empty.txt"
    if kind == "dir":
        (bad / "a-dir").mkdir()
        return bad / "a-dir"
    if kind == "file":
        (bad / "plain.txt").write_text("just some text\n")
        return bad / "plain.txt"
    if kind == "binary":
        (bad / "garbage.bin").write_bytes(BINARY)
        return bad / "garbage.bin"
    if kind == "wrong":
        (bad / "wrong.txt").write_text(wrong)
        return bad / "wrong.txt"
    if kind == "unreadable":
        (bad / "parent.txt").write_text("a file, not a directory\n")
        return bad / "parent.txt" / "x"
    if kind.startswith("dataset-"):  # a directory holding a bad manifest.json
        root = bad / "dataset"
        root.mkdir()
        manifest = root / "manifest.json"
        what = kind.removeprefix("dataset-")
        if what == "nomanifest":
            (root / "part-0.tfrecord").write_bytes(b"")
        elif what == "empty":
            manifest.write_bytes(b"")
        elif what == "binary":
            manifest.write_bytes(BINARY)
        elif what == "wrong":
            manifest.write_text('{"hello": "not a manifest", "shards": 3}\n')
        elif what == "list":
            manifest.write_text("[1, 2, 3]\n")
        elif what == "dir":
            manifest.mkdir()
        return root
    if kind == "src-empty":  # a source tree without a single file
        (bad / "src" / "sub").mkdir(parents=True)
        return bad / "src"
    if kind == "notempty":  # a destination that already holds other files
        (bad / "dst").mkdir()
        (bad / "dst" / "notes.txt").write_text("mine\n")
        return bad / "dst"
    raise AssertionError(kind)


FILE_KINDS = ("missing", "empty", "dir", "binary", "wrong", "unreadable")
SRC_KINDS = ("missing", "empty", "file", "binary", "src-empty", "unreadable")
OUT_KINDS = ("file", "binary", "unreadable")
DATASET_KINDS = (
    "missing",
    "file",
    "dataset-nomanifest",
    "dataset-binary",
    "dataset-wrong",
    "dataset-dir",
    "unreadable",
)

NOT_TOML = "this is not TOML, just a sentence\n"
NOT_LABELS = "name,score\nalice,3\n"

# --------------------------------------------------------------------------- the commands

# (command words with {BAD} where the bad path goes, input kinds, wrong-format text)
# {SPEC} a valid spec, {SRC} an empty-but-valid source folder, {DST} a new destination,
# {SCRIPT} a valid script: the other arguments are good, so the bad one is what is refused.
COMMANDS: list[tuple[str, tuple[str, ...], str]] = [
    ("validate --spec {BAD}", FILE_KINDS, NOT_TOML),
    ("render spark --spec {BAD}", FILE_KINDS, NOT_TOML),
    ("render spark --spec {SPEC} -o {BAD}", OUT_KINDS, ""),
    ("render monitoring --spec {BAD}", FILE_KINDS, NOT_TOML),
    ("render monitoring --spec {SPEC} -o {BAD}", OUT_KINDS, ""),
    ("render yarn --spec {BAD}", FILE_KINDS, NOT_TOML),
    ("render yarn --spec {SPEC} -o {BAD}", OUT_KINDS, ""),
    ("render kueue --spec {BAD}", FILE_KINDS, NOT_TOML),
    ("render kueue --spec {SPEC} -o {BAD}", OUT_KINDS, ""),
    ("render volcano --spec {BAD}", FILE_KINDS, NOT_TOML),
    ("render volcano --spec {SPEC} -o {BAD}", OUT_KINDS, ""),
    ("monitor up --spec {BAD}", FILE_KINDS, NOT_TOML),
    ("top --once --spec {BAD}", ("missing", "binary", "wrong"), NOT_TOML),
    ("init {BAD}", ("dir", "unreadable"), ""),
    ("cluster up --spec {BAD}", FILE_KINDS, NOT_TOML),
    ("cluster up --state-dir {BAD}", OUT_KINDS, ""),
    ("cluster status --state-dir {BAD}", ("file", "unreadable"), ""),
    ("cluster down --state-dir {BAD}", ("file",), ""),
    ("prep dicom {BAD} {DST}", SRC_KINDS, ""),
    ("prep dicom {SRC} {BAD}", (*OUT_KINDS, "notempty"), ""),
    ("prep dicom {SRC} {DST} --labels {BAD}", FILE_KINDS, NOT_LABELS),
    ("prep dicom {SRC} {DST} --spec {BAD}", FILE_KINDS, NOT_TOML),
    ("prep images {BAD} {DST}", SRC_KINDS, ""),
    ("prep images {SRC} {BAD}", OUT_KINDS, ""),
    ("prep images {SRC} {DST} --spec {BAD}", ("missing", "binary", "wrong"), NOT_TOML),
    ("shards inspect {BAD}", (*DATASET_KINDS, "dataset-empty", "dataset-list"), ""),
    ("shards verify {BAD}", DATASET_KINDS, ""),
    ("launch {BAD}", ("missing", "dir", "binary", "unreadable"), ""),
    ("launch --dry-run {BAD}", ("binary",), ""),
    ("launch --spec {BAD} {SCRIPT}", FILE_KINDS, NOT_TOML),
    ("launch --dry-run --spec {BAD} {SCRIPT}", ("missing", "wrong"), NOT_TOML),
    ("train resnet3d --data {BAD}", DATASET_KINDS, ""),
    ("train resnet3d --data {SRC} --spec {BAD}", ("missing", "binary", "wrong"), NOT_TOML),
    ("demo --spec {BAD}", FILE_KINDS, NOT_TOML),
    ("demo --out {BAD}", OUT_KINDS, ""),
    ("datasets synth-ct {BAD}", (*OUT_KINDS, "notempty"), ""),
    ("datasets synth-images {BAD}", (*OUT_KINDS, "notempty"), ""),
]


def _case_id(cmd: str, kind: str) -> str:
    """``prep dicom {SRC} {BAD}`` + ``file`` -> ``prep dicom src BAD:file``."""
    words = [w.strip("{}").lower() if w != "{BAD}" else "BAD" for w in cmd.split()]
    return " ".join(w for w in words if w not in ("spec", "script")) + f":{kind}"


CASES = [
    pytest.param(cmd, kind, wrong, id=_case_id(cmd, kind))
    for cmd, kinds, wrong in COMMANDS
    for kind in kinds
]


def _argv(tmp: Path, cmd: str, bad: Path) -> list[str]:
    from gpuspark.spec import default_spec_text

    spec = tmp / "good.toml"
    spec.write_text(default_spec_text())
    script = tmp / "train.py"
    script.write_text("print('hello')\n")
    src = tmp / "src"
    (src / "a").mkdir(parents=True, exist_ok=True)
    (src / "a" / "x.dcm").write_bytes(b"not really")
    values = {"BAD": bad, "SPEC": spec, "SCRIPT": script, "SRC": src, "DST": tmp / "dst"}
    return [w.format(**{k: str(v) for k, v in values.items()}) for w in cmd.split()]


@pytest.mark.parametrize(("cmd", "kind", "wrong"), CASES)
def test_bad_input_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cmd: str,
    kind: str,
    wrong: str,
) -> None:
    from gpuspark.cli.main import main

    work = tmp_path / "cwd"
    work.mkdir()
    bad = _bad(tmp_path, kind, wrong)
    argv = _argv(tmp_path, cmd, bad)
    state = tmp_path / "state"
    refuse_work(monkeypatch, tmp_path, work)
    try:
        rc = main(argv)
    except Started as exc:
        pytest.fail(f"{' '.join(argv)}: accepted, and started {exc}")
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "Traceback" not in out, out
    assert rc in (1, 2), out
    assert not state.exists() or not any(state.iterdir()), "a cluster was started"
    assert not any(work.iterdir()), f"a refused command wrote {sorted(work.iterdir())}"
    if rc == 1:
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
        named = (str(bad), str(bad.resolve()), os.path.relpath(bad, work))
        assert any(n in lines[0] for n in named), f"{lines[0]!r} does not name {bad}"
        # GpusparkError(remedy=...) prints "message (remedy)"
        assert lines[0].endswith(")"), f"{lines[0]!r} has no remedy"


def test_unforeseen_path_error_is_one_line_naming_the_path(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The last resort in ``main``: an OSError no check caught still names its path."""
    import gpuspark.spec
    from gpuspark.cli.main import main

    def broken(path: object) -> None:
        raise NotADirectoryError(20, "Not a directory", "/data/file.txt/spec.toml")

    monkeypatch.setattr(gpuspark.spec, "load_spec", broken)
    assert main(["validate", "--spec", "spec.toml"]) == 1
    err = capsys.readouterr().err
    assert err == "error: /data/file.txt/spec.toml: Not a directory (check the path)\n"
