"""The cluster spec: the example, every validation rule, error message form, and the CLI."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gpuspark.cli.main import main
from gpuspark.errors import SpecError
from gpuspark.spec import (
    ClusterSpec,
    example_spec,
    gpu_slots_per_executor,
    load_spec,
    parse_spec,
    summary,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_FILE = ROOT / "examples" / "cluster.toml"

MINIMAL = """
name = "laptop"
[[nodes]]
name = "box"
hosts = ["localhost"]
gpus_per_node = 2
gpu_model = "simulated"
gpu_memory_gb = 16
cpu_cores = 8
ram_gb = 32
[networks.compute]
kind = "ethernet"
gbps = 10
latency_us = 50
[networks.storage]
gbps = 10
"""


def _edit(old: str, new: str, text: str | None = None) -> str:
    """The example spec with one exact, unique fragment replaced (fails loudly otherwise)."""
    text = example_spec() if text is None else text
    assert text.count(old) == 1, f"fragment {old!r} is not unique in the example"
    return text.replace(old, new)


def _error(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text, source="cluster.toml")
    return str(info.value)


# ----------------------------------------------------------------------------- the example


def test_example_describes_the_seed_cluster() -> None:
    spec = parse_spec(example_spec(), source="cluster.toml")
    (dgx,) = spec.nodes
    assert (len(dgx.hosts), dgx.gpus_per_node, dgx.gpu_memory_gb) == (2, 8, 80)
    assert "A100" in dgx.gpu_model and dgx.nvlink_gbytes_per_s == 600
    assert (dgx.cpu_cores, dgx.ram_gb, dgx.nvme_tb) == (128, 2048, 30)
    assert spec.networks.compute.kind == "infiniband"
    assert spec.networks.compute.gbps == 100 and spec.networks.compute.latency_us <= 1
    assert (spec.networks.storage.kind, spec.networks.storage.gbps) == ("ethernet", 25)
    assert (spec.spark.executor_gpus, spec.spark.task_gpu_amount) == (1, 0.25)
    assert spec.spark.dynamic_allocation is True
    assert len(spec.teams) == 3
    assert spec.total_gpus == 16 and spec.total_hosts == 2


def test_examples_file_is_the_example() -> None:
    # `gpuspark init` writes example_spec(); the checked-in copy must not drift from it.
    # After changing the example: gpuspark init examples/cluster.toml --force
    assert EXAMPLE_FILE.read_text(encoding="utf-8") == example_spec()


def test_load_spec_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(MINIMAL)
    spec = load_spec(path)
    assert spec.name == "laptop" and spec.total_gpus == 2
    # Defaults for everything optional.
    assert spec.spark.master == "local-cluster" and spec.teams == []
    assert spec.monitoring.gpu_temp_c == 85
    assert spec.event_log_dir == "gpuspark-data/spark-events"


def test_spec_is_plain_data() -> None:
    spec = parse_spec(example_spec())
    again = ClusterSpec.model_validate(spec.model_dump())
    assert again == spec
    with pytest.raises(ValidationError):  # frozen
        spec.name = "other"  # type: ignore[misc]


def test_summary_figures() -> None:
    info = summary(parse_spec(example_spec()))
    assert info["gpus"] == 16 and info["hosts"] == 2
    assert info["guaranteed_gpus"] == 16
    assert [t["name"] for t in info["teams"]] == ["radiology", "vision", "research"]
    assert info["task_slots_per_executor"] == 4


# ----------------------------------------------------------------------------- messages


def test_issue_example_message_exactly() -> None:
    text = _edit(
        'name = "vision"\nguaranteed_gpus = 4\nmax_gpus = 12',
        'name = "vision"\nguaranteed_gpus = 8\nmax_gpus = 4',
        _edit('name = "radiology"\nguaranteed_gpus = 8', 'name = "radiology"\nguaranteed_gpus = 4'),
    )
    assert _error(text) == "cluster.toml: teams[1].max_gpus=4 is below guaranteed_gpus=8"


def test_load_spec_names_the_file_as_given(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(_edit("gpus_per_node = 8", "gpus_per_node = 0"))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == f"{path}: nodes[0].gpus_per_node=0: must be greater than 0"


def test_missing_file() -> None:
    with pytest.raises(SpecError, match=r"nope\.toml: no such file.*gpuspark init"):
        load_spec("nope.toml")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "[monitoring] ",
            "[monitor] ",
            "cluster.toml: monitor is not a known key at the top level"
            " (did you mean 'monitoring'?)",
        ),
        (
            '[[teams]]\nname = "research"',
            '[[team]]\nname = "research"',
            "cluster.toml: team is not a known key at the top level (did you mean 'teams'?)",
        ),
        (
            "executor_gpus = 1 ",
            "executor_gpu = 1 ",
            "cluster.toml: spark.executor_gpu is not a known key in [spark]"
            " (did you mean 'executor_gpus'?)",
        ),
        (
            "gpu_memory_gb = 80",
            "gpu_mem_gb = 80",
            "cluster.toml: nodes[0].gpu_mem_gb is not a known key in [nodes[0]]"
            " (did you mean 'gpu_memory_gb'?)",
        ),
        (
            "gpu_temp_c = 85",
            "gpu_temperature = 85",
            "cluster.toml: monitoring.gpu_temperature is not a known key in [monitoring]"
            " (did you mean 'gpu_temp_c'?)",
        ),
    ],
)
def test_unknown_keys_get_did_you_mean(old: str, new: str, expected: str) -> None:
    assert _error(_edit(old, new)) == expected


def test_unknown_key_without_a_close_match_lists_the_allowed_keys() -> None:
    msg = _error(_edit("latency_us = 1.0", "latency_us = 1.0\nzzz = 1"))
    assert msg == (
        "cluster.toml: networks.compute.zzz is not a known key in [networks.compute];"
        " allowed: gbps, kind, latency_us"
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # guaranteed GPUs of all teams <= GPUs in the cluster
        (
            "guaranteed_gpus = 4\nmax_gpus = 8",
            "guaranteed_gpus = 8\nmax_gpus = 8",
            "teams[*].guaranteed_gpus add up to 20, more than the 16 GPUs in the cluster;"
            " lower the guarantees to a total of at most 16",
        ),
        (
            "max_gpus = 16",
            "max_gpus = 17",
            "teams[0].max_gpus=17 is above the 16 GPUs in the cluster",
        ),
        # task GPU amount: a fraction in (0, 1] or a whole number
        (
            "task_gpu_amount = 0.25",
            "task_gpu_amount = 1.5",
            "spark.task_gpu_amount=1.5: must be a fraction in (0, 1] or a whole number,"
            " e.g. 0.25 or 2",
        ),
        (
            "task_gpu_amount = 0.25",
            "task_gpu_amount = 0",
            "spark.task_gpu_amount=0: must be greater than 0",
        ),
        (
            "executor_gpus = 1 ",
            "executor_gpus = 1\ntask_gpu_amount = 2 ",
            None,  # duplicate key: a TOML error, checked below
        ),
        # Spark's rule that GPU slots and CPU slots agree
        (
            "executor_cores = 16 ",
            "executor_cores = 8 ",
            "spark.executor_cores=8 gives 2 task slots per executor (executor_cores / task_cpus"
            " = 8 / 4) but the GPUs give 4 (executor_gpus / task_gpu_amount = 1 / 0.25);"
            " Spark would leave GPU shares idle: set executor_cores=16 or task_cpus=2",
        ),
        (
            "task_cpus = 4",
            "task_cpus = 1",
            "spark.executor_cores=16 gives 16 task slots per executor (executor_cores /"
            " task_cpus = 16 / 1) but the GPUs give 4 (executor_gpus / task_gpu_amount ="
            " 1 / 0.25); Spark would leave cores idle: set executor_cores=4 or task_cpus=4",
        ),
        (
            "executor_gpus = 1 ",
            "executor_gpus = 9 ",
            "2 problems: (1) spark.executor_gpus=9 is above nodes[0].gpus_per_node=8; an"
            " executor runs on one node; (2) spark.executor_cores=16 gives 4 task slots per"
            " executor (executor_cores / task_cpus = 16 / 4) but the GPUs give 36 (executor_gpus"
            " / task_gpu_amount = 9 / 0.25); Spark would leave GPU shares idle: set"
            " executor_cores=144",
        ),
        (
            "executor_cores = 16 ",
            "executor_cores = 256 ",
            "2 problems: (1) spark.executor_cores=256 is above nodes[0].cpu_cores=128; an"
            " executor runs on one node; (2) spark.executor_cores=256 gives 64 task slots per"
            " executor (executor_cores / task_cpus = 256 / 4) but the GPUs give 4 (executor_gpus"
            " / task_gpu_amount = 1 / 0.25); Spark would leave cores idle: set executor_cores=16"
            " or task_cpus=64",
        ),
        # unique names
        (
            'name = "vision"',
            'name = "radiology"',
            'teams[1].name="radiology" repeats teams[0].name; names must be unique',
        ),
        (
            'hosts = ["dgx01", "dgx02"]',
            'hosts = ["dgx01", "dgx01"]',
            'nodes[0].hosts[1]="dgx01" is already listed in nodes[0].hosts',
        ),
        # field forms
        (
            'master = "spark://dgx01:7077"',
            'master = "spark//dgx01"',
            'spark.master="spark//dgx01": must be local-cluster, local[N], spark://host:port,'
            " yarn or k8s://https://host:port",
        ),
        (
            '"200g"',
            '"200 GB"',
            'spark.executor_memory="200 GB": must be a JVM memory size like 512m, 4g or 1t',
        ),
        (
            'kind = "infiniband"',
            'kind = "omnipath"',
            "networks.compute.kind=\"omnipath\": must be 'infiniband' or 'ethernet'",
        ),
        (
            "gpus_per_node = 8",
            'gpus_per_node = "eight"',
            'nodes[0].gpus_per_node="eight": must be a valid integer, unable to parse string'
            " as an integer",
        ),
        (
            'name = "vision"',
            'name = "vision team"',
            'teams[1].name="vision team": must start with an ASCII letter (A-Z, a-z) and use'
            " only ASCII letters, digits, '_', '-' and '.': names become YARN queues and"
            " Kubernetes objects, whose names are ASCII",
        ),
        (
            'hosts = ["dgx01", "dgx02"]',
            "hosts = []",
            "nodes[0].hosts=[]: must list at least 1 item(s)",
        ),
        (
            'name = "dgx-a100"\n',
            "",
            "name is missing (required)",
        ),
        (
            '[[nodes]]\nname = "dgx"',
            '[nodes]\nname = "dgx"',
            "nodes must be an array of tables: write [[nodes]] above each entry",
        ),
        (
            '"spark.sql.shuffle.partitions" = "512"',
            '"spark.task.resource.gpu.amount" = "0.5"',
            'spark.conf."spark.task.resource.gpu.amount"="0.5" is set by'
            " spark.task_gpu_amount; set that instead",
        ),
    ],
)
def test_each_rule_gives_one_line_naming_the_field(
    old: str, new: str, expected: str | None
) -> None:
    msg = _error(_edit(old, new))
    assert "\n" not in msg
    if expected is None:
        assert msg.startswith("cluster.toml:") and "invalid TOML" in msg
    else:
        assert msg == f"cluster.toml: {expected}"


@pytest.mark.parametrize(
    "master",
    [
        "local-cluster",
        "local[*]",
        "local[4]",
        "spark://h1:7077",
        "spark://h1:7077,h2:7077",
        "yarn",
        "k8s://https://api.example:6443",
    ],
)
def test_master_forms_accepted(master: str) -> None:
    spec = parse_spec(_edit('master = "spark://dgx01:7077"', f'master = "{master}"'))
    assert spec.spark.master == master


def test_several_errors_are_all_shown() -> None:
    """Every problem is on the line, numbered (a problem's own text may hold ';')."""
    text = _edit("gpus_per_node = 8", "gpus_per_node = -1", _edit("ram_gb = 2048", "ram_gb = 0"))
    assert _error(text) == (
        "cluster.toml: 2 problems: (1) nodes[0].gpus_per_node=-1: must be greater than 0;"
        " (2) nodes[0].ram_gb=0: must be greater than 0"
    )


def test_a_non_ascii_name_is_refused_saying_which_characters_and_why() -> None:
    """``radiología``: í is a letter, but not one a YARN queue or a Kubernetes name takes."""
    text = _edit('name = "radiology"', 'name = "radiología-é"')
    assert _error(text) == (
        'cluster.toml: teams[0].name="radiología-é": must start with an ASCII letter (A-Z,'
        " a-z) and use only ASCII letters, digits, '_', '-' and '.': names become YARN queues"
        " and Kubernetes objects, whose names are ASCII"
    )


def test_bad_toml_names_file_and_line() -> None:
    msg = _error(_edit("gpus_per_node = 8", "gpus_per_node = "))
    line = example_spec().splitlines().index("gpus_per_node = 8") + 1
    assert msg.startswith(f"cluster.toml:{line}:")
    assert "invalid TOML" in msg and "\n" not in msg


# ----------------------------------------------------------------------------- Spark's rules


@pytest.mark.parametrize(
    ("gpus", "amount", "slots"),
    [(1, 0.25, 4), (1, 1.0, 1), (2, 0.5, 4), (1, 0.3, 3), (4, 2.0, 2), (3, 2.0, 1), (8, 0.125, 64)],
)
def test_gpu_slots_follow_spark(gpus: int, amount: float, slots: int) -> None:
    # Spark: an amount in (0, 1] gives floor(1/amount) tasks per address; a whole number
    # above 1 takes that many addresses per task.
    assert gpu_slots_per_executor(gpus, amount) == slots


def test_fraction_that_is_not_one_over_n_is_accepted_as_spark_does() -> None:
    # 0.3 -> 3 tasks per GPU (Spark allows it); executor_cores must then be 3 per GPU.
    spec = parse_spec(
        _edit(
            "executor_cores = 16 ",
            "executor_cores = 3 ",
            _edit(
                "task_cpus = 4",
                "task_cpus = 1",
                _edit("task_gpu_amount = 0.25", "task_gpu_amount = 0.3"),
            ),
        )
    )
    assert spec.spark.task_gpu_amount == pytest.approx(0.3)


def test_whole_gpu_tasks() -> None:
    text = _edit(
        "executor_gpus = 1 ",
        "executor_gpus = 4 ",
        _edit("task_gpu_amount = 0.25", "task_gpu_amount = 2"),
    )
    text = _edit("executor_cores = 16 ", "executor_cores = 8 ", text)
    spec = parse_spec(text)  # 4 GPUs / 2 per task = 2 slots = 8 cores / 4 cpus per task
    assert gpu_slots_per_executor(spec.spark.executor_gpus, spec.spark.task_gpu_amount) == 2
    too_big = _edit("task_gpu_amount = 0.25", "task_gpu_amount = 2")
    assert _error(too_big) == (
        "cluster.toml: spark.task_gpu_amount=2 is above executor_gpus=1; a task cannot use"
        " more GPUs than its executor has"
    )


def test_dotted_spark_conf_keys_are_flattened() -> None:
    text = _edit(
        '"spark.sql.shuffle.partitions" = "512"',
        "spark.sql.shuffle.partitions = 512\nspark.ui.enabled = false\nspark.x.ratio = 0.5",
    )
    conf = parse_spec(text).spark.conf
    assert conf["spark.sql.shuffle.partitions"] == "512"
    assert conf["spark.ui.enabled"] == "false" and conf["spark.x.ratio"] == "0.5"


def test_team_defaults_and_guarantees_may_leave_gpus_free() -> None:
    data = parse_spec(example_spec()).model_dump()
    data["teams"] = [{"name": "only", "guaranteed_gpus": 0, "max_gpus": 16}]
    spec = ClusterSpec.model_validate(data)
    assert spec.teams[0].members == [] and spec.teams[0].priority == 0


# ----------------------------------------------------------------------------- CLI


def test_cli_init_prints_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init"]) == 0
    assert capsys.readouterr().out == example_spec()


def test_cli_init_writes_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "conf" / "cluster.toml"
    path.parent.mkdir()
    assert main(["init", str(path)]) == 0
    assert path.read_text() == example_spec()
    assert f"wrote {path}" in capsys.readouterr().out
    path.write_text("# mine\n")
    assert main(["init", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {path} already exists (pass --force to overwrite it)\n"
    assert path.read_text() == "# mine\n"
    assert main(["init", str(path), "--force"]) == 0
    assert path.read_text() == example_spec()
    assert sorted(p.name for p in path.parent.iterdir()) == ["cluster.toml"]  # no temp files


def test_cli_init_expands_a_quoted_tilde(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gpuspark init '~/x.toml'`` (the shell left ``~`` alone) writes in the home folder,
    not in a new folder named ``~``."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["init", "~/x.toml"]) == 0
    assert (tmp_path / "home" / "x.toml").read_text() == example_spec()
    assert not (tmp_path / "~").exists()
    assert f"--spec {tmp_path / 'home' / 'x.toml'}" in capsys.readouterr().out


def test_cli_init_refuses_a_missing_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing folder is refused in one line that says how to make it; nothing is made."""
    path = tmp_path / "no such" / "dir" / "x.toml"
    assert main(["init", str(path)]) == 1
    folder = shlex.quote(str(path.parent))
    assert capsys.readouterr().err == (
        f"error: init {path}: no folder to write in ({path.parent} does not exist) "
        f"(create it first with mkdir -p {folder}, or name a file in an existing folder)\n"
    )
    assert not (tmp_path / "no such").exists()


def test_cli_init_quotes_the_path_of_the_next_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The printed next command is one the shell runs as printed: the path is quoted."""
    path = tmp_path / "my specs" / "team's.toml"
    path.parent.mkdir()
    assert main(["init", str(path)]) == 0
    out = capsys.readouterr().out
    command = out.split("check it with: ", 1)[1].strip()
    assert shlex.split(command) == ["gpuspark", "validate", "--spec", str(path)]


def test_cli_validate_good(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLE_FILE)]) == 0
    out = capsys.readouterr().out
    assert "radiology" in out and "A100-SXM4-80GB" in out
    assert "is valid: 2 nodes, 16 GPUs, 3 teams (16 of 16 GPUs guaranteed)" in out


def test_cli_validate_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLE_FILE), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["valid"] is True and info["gpus"] == 16
    assert [t["max_gpus"] for t in info["teams"]] == [16, 12, 8]


def _bad_file(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(_edit("max_gpus = 12", "max_gpus = 2"))
    return path


def test_cli_validate_bad_is_one_line_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUSPARK_DEBUG", raising=False)
    path = _bad_file(tmp_path)
    assert main(["validate", "--spec", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"error: {path}: teams[1].max_gpus=2 is below guaranteed_gpus=4\n"


def test_cli_validate_bad_with_debug_shows_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSPARK_DEBUG", "1")
    path = _bad_file(tmp_path)
    assert main(["validate", "--spec", str(path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "SpecError" in err
    assert err.endswith(f"error: {path}: teams[1].max_gpus=2 is below guaranteed_gpus=4\n")


def test_cli_validate_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "absent.toml"
    assert main(["validate", "--spec", str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {missing}: no such file") and err.count("\n") == 1


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.integers(1, 8),
    per_gpu=st.integers(1, 8),
    task_cpus=st.integers(1, 4),
    extra=st.integers(-3, 3),
)
def test_slot_rule_accepts_exactly_the_agreeing_shapes(
    gpus: int, per_gpu: int, task_cpus: int, extra: int
) -> None:
    # executor_gpus / (1/per_gpu) GPU slots; executor_cores / task_cpus CPU slots.
    cores = gpus * per_gpu * task_cpus + extra
    assume(task_cpus <= cores <= 128)
    data = parse_spec(example_spec()).model_dump()
    data["spark"].update(
        executor_gpus=gpus, task_gpu_amount=1 / per_gpu, executor_cores=cores, task_cpus=task_cpus
    )
    agree = cores // task_cpus == gpus * per_gpu
    if agree:
        assert ClusterSpec.model_validate(data).spark.executor_cores == cores
    else:
        with pytest.raises(ValidationError, match="task slots per executor"):
            ClusterSpec.model_validate(data)
