"""``gpuspark render ... -o DIR`` writes only what it owns.

A user's own file of a name render writes (``mkdir v2; echo "my hand-tuned conf" >
v2/spark-defaults.conf; gpuspark render spark --spec examples/cluster.toml -o v2``) used to be
replaced with exit 0. Now every render kind refuses, before writing anything, to replace a file
it did not write or that was edited since its last render, and lists those files;
``--overwrite`` replaces them; a render over its own earlier output goes through.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuspark.cli.main import main
from gpuspark.cluster.conf import RENDER_MARKER, not_owned, write_owned

EXAMPLE_FILE = Path(__file__).resolve().parents[2] / "examples" / "cluster.toml"

KINDS = {
    "spark": "spark-defaults.conf",
    "monitoring": "prometheus.yml",
    "yarn": "capacity-scheduler.xml",
    "kueue": "kueue/cluster-queues.yaml",
    "volcano": "volcano/queues.yaml",
    "k8s": "spark/spark-defaults.conf",
    "standalone": "spark-defaults.conf",
}
"""Each render kind and one file it writes."""


def _render(kind: str, out: Path, *extra: str) -> int:
    return main(["render", kind, "--spec", str(EXAMPLE_FILE), "-o", str(out), *extra])


def _written(kind: str, tmp_path: Path) -> set[str]:
    """The files ``render kind`` writes, from a render into an empty folder."""
    probe = tmp_path / f"probe-{kind}"
    assert _render(kind, probe) == 0
    return {str(p.relative_to(probe)) for p in probe.rglob("*") if p.is_file()} - {RENDER_MARKER}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_users_file_is_kept_unless_overwrite(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = _written(kind, tmp_path)
    name = KINDS[kind] if KINDS[kind] in names else sorted(names)[0]
    out = tmp_path / "v2"
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).write_text("my hand-tuned conf\n")
    capsys.readouterr()
    assert _render(kind, out) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out {out} holds 1 file that gpuspark render did not write")
    assert f": {name} (pass --overwrite" in err and err.count("\n") == 1
    assert (out / name).read_text() == "my hand-tuned conf\n"
    assert {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} == {name}
    assert _render(kind, out, "--overwrite") == 0
    assert (out / name).read_text() != "my hand-tuned conf\n"
    assert _render(kind, out) == 0  # its own output: rendered again without --overwrite


def test_an_edited_file_and_every_foreign_one_are_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "conf"
    assert _render("spark", out) == 0
    with open(out / "metrics.properties", "a") as fh:
        fh.write("# tuned by hand\n")
    (out / "spark-defaults.conf").unlink()
    os.symlink("/etc/hostname", out / "spark-defaults.conf")
    capsys.readouterr()
    assert _render("spark", out) == 1
    err = capsys.readouterr().err
    assert "holds 2 files that gpuspark render did not write or that were changed since: " in err
    assert "metrics.properties, spark-defaults.conf (pass --overwrite to replace them" in err
    assert (out / "metrics.properties").read_text().endswith("# tuned by hand\n")


def test_identical_content_needs_no_overwrite(tmp_path: Path) -> None:
    files = {"a.conf": "x = 1\n", "sub/b.yaml": "k: v\n"}
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.conf").write_text("x = 1\n")  # the same bytes: nothing would be lost
    assert not_owned(files, tmp_path) == []
    (tmp_path / "sub" / "b.yaml").write_text("k: mine\n")
    assert not_owned(files, tmp_path) == ["sub/b.yaml"]
    write_owned(files, tmp_path, overwrite=True)
    (tmp_path / "sub" / "b.yaml").write_text("k: v\n")
    assert not_owned({**files, "sub/b.yaml": "k: w\n"}, tmp_path) == []  # recorded: ours


def test_a_quoted_tilde_is_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``render spark -o '~/conf'`` (quoted: the shell leaves ``~``) made a folder named ``~``
    in the working directory; it writes into the home folder, as unquoted."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert main(["render", "spark", "--spec", str(EXAMPLE_FILE), "-o", "~/conf"]) == 0
    assert (home / "conf" / "spark-defaults.conf").is_file()
    assert list(work.iterdir()) == []
