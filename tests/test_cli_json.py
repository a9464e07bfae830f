"""Under ``--json`` a failure is one JSON object on stdout (``error``, ``remedy``,
``exit_code``) with the exit code the command has without ``--json``; ``launch --dry-run
--json`` and ``render spark --json`` print data. No test here starts Spark: each failure
happens before a session would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cli.main import main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _error_object(out: str) -> dict[str, Any]:
    """``out`` parsed as the one JSON error object (``json.loads`` refuses a second one)."""
    obj = json.loads(out)
    assert set(obj) == {"error", "remedy", "exit_code"}, obj
    return obj


@pytest.fixture
def bad_spec(tmp_path: Path) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text("x = [\n", encoding="utf-8")
    return path


def _cases(tmp_path: Path, bad_spec: Path) -> list[tuple[list[str], list[str]]]:
    """``(command words, arguments)`` of commands that fail before any session starts, each
    a different kind of failure (``--json`` goes between them: after launch's SCRIPT it
    would be the script's)."""
    missing = str(tmp_path / "missing")
    return [
        (["validate"], ["--spec", str(bad_spec)]),  # a SpecError
        (["shards", "inspect"], [missing]),  # a NotADatasetError
        (["prep", "images"], [missing, str(tmp_path / "out")]),  # a PrepError
        (["launch"], ["--dry-run", "--spec", str(bad_spec), "t.py"]),  # as the run reads it
        (["render", "spark"], ["--spec", f"{missing}.toml"]),  # no such file
        (["plan"], ["--nodes", "many"]),  # a usage error: exit code 2
    ]


def test_a_failure_under_json_is_one_object_with_the_same_exit_code(
    tmp_path: Path, bad_spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for words, args in _cases(tmp_path, bad_spec):
        code, _, err = _run([*words, *args], capsys)
        assert code in (1, 2) and err.startswith("error: "), (words, err)
        json_code, json_out, json_err = _run([*words, "--json", *args], capsys)
        obj = _error_object(json_out)
        assert json_code == code == obj["exit_code"], words
        assert json_err == "", words
        assert obj["error"] and obj["error"] in err, (words, obj, err)
        assert obj["remedy"] is None or obj["remedy"] in err, (words, obj, err)


def test_the_error_object_keeps_message_and_remedy_apart(
    bad_spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(["validate", "--json", "--spec", str(bad_spec)], capsys)
    obj = _error_object(out)
    assert code == 1
    assert obj["error"].startswith(f"{bad_spec}:2: invalid TOML")
    assert "gpuspark init" in obj["remedy"] and "gpuspark init" not in obj["error"]


def test_a_usage_error_names_the_help_as_its_remedy(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["shards", "inspect", "--json", "--no-such-option", "x"], capsys)
    obj = _error_object(out)
    assert code == obj["exit_code"] == 2 and err == ""
    assert "--no-such-option" in obj["error"]
    assert obj["remedy"] == "see 'gpuspark shards inspect --help'"


def test_json_counts_only_where_the_invoked_command_takes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``--json`` after launch's SCRIPT is the script's, not launch's: the error stays
    text; a ``--json`` of a group does not make its subcommand's errors JSON."""
    code, out, err = _run(["launch", "--dry-run", str(tmp_path / "t.py"), "--json"], capsys)
    assert (code, out) == (1, "") and err.startswith("error: script ")
    code, out, err = _run(["doctor", "--json", "logs", str(tmp_path / "missing")], capsys)
    assert (code, out) == (2, "") and err.startswith("error: ")


def test_an_interrupt_under_json_is_an_object_too(
    bad_spec: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(_path: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("gpuspark.spec.load_spec", interrupted)
    code, out, err = _run(["validate", "--spec", str(bad_spec), "--json"], capsys)
    obj = _error_object(out)
    assert code == obj["exit_code"] == 130 and err == ""
    assert obj["error"].startswith("validate was interrupted; nothing was written")


def test_launch_dry_run_json_is_a_structured_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("print('hi')\n", encoding="utf-8")
    argv = ["launch", "--dry-run", "--json", "-n", "4", "--nproc-per-node", "2"]
    code, out, _ = _run([*argv[:3], "-n", "3", "--local", "t.py", "--epochs", "1"], capsys)
    plan = json.loads(out)
    assert code == 0
    assert plan["mode"] == "local" and plan["master"] is None
    assert (plan["ranks"], plan["nodes"], plan["ranks_per_node"]) == (3, 1, 3)
    assert plan["script"].endswith("t.py") and plan["script_args"] == ["--epochs", "1"]
    assert plan["barrier_stage"] is None and plan["module"] is False
    assert plan["text"].startswith("mode: local")
    code, out, _ = _run([*argv, "t.py"], capsys)  # on Spark: 2 tasks of 2 ranks
    plan = json.loads(out)
    assert (plan["mode"], plan["nodes"], plan["ranks_per_node"]) == ("spark", 2, 2)
    assert plan["barrier_stage"] == {"tasks": 2, "cpus_per_task": 1, "gpus_per_task": 2.0}


def test_render_spark_json_prints_or_lists_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "cluster.toml"
    assert main(["init", str(spec)]) == 0
    capsys.readouterr()
    code, out, _ = _run(["render", "spark", "--spec", str(spec), "--json"], capsys)
    files = json.loads(out)["files"]
    assert code == 0
    assert set(files) == {"spark-defaults.conf", "metrics.properties", "getGpusResources.sh"}
    assert "spark.dynamicAllocation.enabled" in files["spark-defaults.conf"]
    code, out, _ = _run(
        ["render", "spark", "--spec", str(spec), "-o", str(tmp_path / "out"), "--json"], capsys
    )
    written = json.loads(out)
    assert code == 0 and written["notes"] == [] and written["private"] == []
    assert sorted(Path(p).name for p in written["written"]) == sorted(files)
    assert (tmp_path / "out" / "spark-defaults.conf").read_text() == files["spark-defaults.conf"]


def test_shards_verify_json_with_problems_is_one_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The problems are the output; the exit code (1) says they were found."""
    from gpuspark.data.format import Problem

    problem = Problem(shard="s-0.tfrecord", record=1, offset=20, message="bad CRC")
    monkeypatch.setattr("gpuspark.data.format.verify_dataset", lambda _path: [problem])
    code, out, err = _run(["shards", "verify", str(tmp_path), "--json"], capsys)
    assert code == 1 and err == ""
    assert json.loads(out)["problems"][0]["message"] == "bad CRC"
