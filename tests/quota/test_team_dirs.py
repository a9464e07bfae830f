"""Teams apart on disk: no write into another team's dataset root (library, ``submit_under``,
``prep`` and ``train`` entries, the CLI), ``..`` and symbolic links resolved, URLs normalised;
group-owned output directories (mode 2750); the spec's rules on team roots and groups; the
README's example entries parse. No Spark here: where a job would start, a stand-in records it.
"""

from __future__ import annotations

import grp
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cluster.team_dirs import GROUP_DIR_MODE
from gpuspark.errors import LaunchError, SpecError
from gpuspark.quota import check_writes, team, team_output_dir
from gpuspark.spec import ClusterSpec, default_spec_text, parse_spec, team_root

ROOT = Path(__file__).resolve().parents[2]
_STORAGE = '[storage]\nroot = "gpuspark-data"\n'


def make_spec(store: str, *, a: str = "", b: str = "", source: str = "cluster.toml") -> ClusterSpec:
    """The built-in spec with storage root ``store`` and teams ``a`` and ``b`` (``a``/``b``:
    extra TOML lines of each entry)."""
    text = default_spec_text()
    assert text.count(_STORAGE) == 1
    text = text.replace(_STORAGE, f'[storage]\nroot = "{store}"\n')
    for name, extra in (("a", a), ("b", b)):
        text += f'\n[[teams]]\nname = "{name}"\nguaranteed_gpus = 1\nmax_gpus = 2\n{extra}\n'
    return parse_spec(text, source=source)


def spec_error(store: str, **entries: str) -> str:
    with pytest.raises(SpecError) as info:
        make_spec(store, **entries)
    return str(info.value)


def other_group() -> grp.struct_group:
    """An existing group, other than this process's own where the machine has one."""
    groups = sorted(grp.getgrall(), key=lambda g: g.gr_gid)
    others = [g for g in groups if g.gr_gid != os.getgid()]
    return (others or groups)[0]


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture()
def spec(store: Path) -> ClusterSpec:
    return make_spec(str(store))


# --------------------------------------------------------------------------- writes


def test_a_write_into_another_teams_root_is_refused_in_one_line(
    spec: ClusterSpec, store: Path
) -> None:
    target = store / "teams" / "b" / "x"
    with pytest.raises(LaunchError) as info:
        check_writes(spec, "a", [target])
    err = info.value
    assert err.message == (
        f"team a may not write {target}: it is in team b's root ({store / 'teams' / 'b'})"
    )
    assert str(store / "teams" / "a") in (err.remedy or "")
    assert "\n" not in str(err)
    # the other team's root itself, and as a Team value rather than a name
    with pytest.raises(LaunchError, match="team b may not write"):
        check_writes(spec, spec.teams[1], [None, store / "teams" / "a"])


def test_own_root_and_paths_outside_every_root_are_allowed(
    spec: ClusterSpec, store: Path, tmp_path: Path
) -> None:
    check_writes(
        spec,
        "a",
        [
            store / "teams" / "a",
            store / "teams" / "a" / "sets" / "x",
            store / "shared" / "x",  # the storage root, not a team's
            store / "teams" / "bb",  # shares a prefix with b's root, but is not inside it
            tmp_path / "elsewhere",
            None,
        ],
    )


def test_no_team_or_no_teams_means_no_check(spec: ClusterSpec, store: Path) -> None:
    check_writes(spec, None, [store / "teams" / "b" / "x"])
    bare = parse_spec(default_spec_text())
    check_writes(bare, None, [store / "teams" / "b" / "x"])


def test_dotdot_escape_is_caught_and_shown(spec: ClusterSpec, store: Path) -> None:
    sneaky = f"{store}/teams/a/../b/x"
    with pytest.raises(LaunchError) as info:
        check_writes(spec, "a", [sneaky])
    assert info.value.message.startswith(
        f"team a may not write {sneaky} (that is {store}/teams/b/x): it is in team b's root"
    )


def test_relative_path_escape_is_caught(
    spec: ClusterSpec, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (store / "teams" / "a").mkdir(parents=True)
    monkeypatch.chdir(store / "teams" / "a")
    with pytest.raises(LaunchError, match="in team b's root"):
        check_writes(spec, "a", ["../b/x"])
    check_writes(spec, "a", ["x"])


def test_symlink_escapes_are_caught(spec: ClusterSpec, store: Path, tmp_path: Path) -> None:
    (store / "teams" / "a").mkdir(parents=True)
    (store / "teams" / "b").mkdir(parents=True)
    inside = store / "teams" / "a" / "link"
    inside.symlink_to(store / "teams" / "b")
    outside = tmp_path / "outside"
    outside.symlink_to(store / "teams" / "b" / "deep", target_is_directory=True)
    for path in (inside / "x", outside, outside / "y"):
        with pytest.raises(LaunchError, match=rf"that is {re.escape(str(store))}/teams/b"):
            check_writes(spec, "a", [path])


def test_a_team_root_behind_a_symlink_is_guarded_where_it_leads(tmp_path: Path) -> None:
    real = tmp_path / "disks" / "b-data"
    real.mkdir(parents=True)
    (tmp_path / "b-root").symlink_to(real)
    spec = make_spec(str(tmp_path / "store"), b=f'root = "{tmp_path / "b-root"}"')
    with pytest.raises(LaunchError, match=rf"in team b's root \({re.escape(str(real))}\)"):
        check_writes(spec, "a", [real / "x"])


def test_urls_are_compared_normalised() -> None:
    spec = make_spec("s3a://bucket/gp")
    for path in (
        "s3://bucket/gp/teams/b/x",
        "s3a://BUCKET/gp/teams/b",
        "simplecache::s3a://bucket/gp//teams/b/x/",
        "s3://bucket/gp/teams/a/../b/y",
    ):
        with pytest.raises(LaunchError, match="in team b's root \\(s3://bucket/gp/teams/b\\)"):
            check_writes(spec, "a", [path])
    check_writes(spec, "a", ["s3://bucket/gp/teams/a/x", "s3://bucket/gp/teams/bb", "/gp/b"])


def test_submit_under_checks_writes_before_any_settings(spec: ClusterSpec, store: Path) -> None:
    with pytest.raises(LaunchError, match="team a may not write"):
        team.submit_under(spec, "a", "yarn", writes=[None, store / "teams" / "b" / "x"])
    ok = team.submit_under(spec, "a", "yarn", writes=[store / "teams" / "a" / "x"])
    assert ok.conf["spark.yarn.queue"] == "a" and ok.created == ()
    assert not store.exists()  # no group: nothing made up front, the writer makes it later


# --------------------------------------------------------------------------- directories


def _assert_group_dir(path: Path, gid: int) -> None:
    info = path.stat()
    assert info.st_gid == gid, path
    assert stat.S_IMODE(info.st_mode) == GROUP_DIR_MODE == 0o2750, oct(info.st_mode)


def test_group_team_output_dir_is_group_owned_2750(store: Path) -> None:
    group = other_group()
    spec = make_spec(str(store), a=f'group = "{group.gr_name}"')
    target = store / "teams" / "a" / "sets" / "x"
    made = team.submit_under(spec, "a", "yarn", writes=[target]).created
    assert made == tuple(
        str(p) for p in (store, store / "teams", store / "teams" / "a", target.parent, target)
    )
    for path in (store / "teams" / "a", target.parent, target):
        _assert_group_dir(path, group.gr_gid)
    for path in (store, store / "teams"):  # above the team's root: plain folders
        assert stat.S_IMODE(path.stat().st_mode) & stat.S_ISGID == 0
    (target / "shard-00000.tfrecord").write_bytes(b"x")  # setgid: files inherit the group
    (target / "sub").mkdir()
    assert (target / "shard-00000.tfrecord").stat().st_gid == group.gr_gid
    assert (target / "sub").stat().st_gid == group.gr_gid


def test_group_dir_outside_the_teams_root_gets_the_group_only_itself(
    store: Path, tmp_path: Path
) -> None:
    group = other_group()
    spec = make_spec(str(store), a=f'group = "{group.gr_name}"')
    target = tmp_path / "scratch" / "out"
    assert team_output_dir(spec, "a", target) == [str(target.parent), str(target)]
    _assert_group_dir(target, group.gr_gid)
    assert stat.S_IMODE(target.parent.stat().st_mode) & stat.S_ISGID == 0
    assert team_output_dir(spec, "a", target) == []  # already there: left as it is
    assert team_output_dir(spec, "a", "s3://bucket/x") == []


def test_without_a_group_output_dir_is_a_plain_mkdir(spec: ClusterSpec, store: Path) -> None:
    target = store / "teams" / "a" / "x"
    assert team_output_dir(spec, "a", target)[-1] == str(target)
    assert target.is_dir() and stat.S_IMODE(target.stat().st_mode) & stat.S_ISGID == 0


def test_an_unknown_group_is_a_clear_error_and_makes_nothing(store: Path) -> None:
    spec = make_spec(str(store), a='group = "no-such-group-gpuspark"')
    with pytest.raises(SpecError) as info:
        team.submit_under(spec, "a", "yarn", writes=[store / "teams" / "a" / "x"])
    assert info.value.message == (
        "team a's group 'no-such-group-gpuspark' does not exist on this machine"
    )
    assert "groupadd no-such-group-gpuspark" in (info.value.remedy or "")
    assert not store.exists()


def test_discard_on_error_removes_the_empty_folders_made(store: Path) -> None:
    spec = make_spec(str(store), a=f'group = "{other_group().gr_name}"')
    target = store / "teams" / "a" / "x"
    submit = team.submit_under(spec, "a", "yarn", writes=[target])
    with pytest.raises(RuntimeError), submit.discard_on_error():
        raise RuntimeError("the job failed")
    assert not store.exists()
    kept = team.submit_under(spec, "a", "yarn", writes=[target])
    with kept.discard_on_error():
        (target / "manifest.json").write_text("{}")
    assert target.is_dir()


# --------------------------------------------------------------------------- job entries


@pytest.fixture()
def no_session(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """``job_session`` of the prep jobs replaced: records what exists when it is reached."""
    from gpuspark.data.prep import job as prep_job

    seen: list[Any] = []

    def job_session(*_a: Any, **_kw: Any) -> Iterator[Any]:
        seen.append(_kw)
        raise RuntimeError("no cluster in this test")

    monkeypatch.setattr(prep_job, "job_session", job_session)
    return seen


def _image_folder(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "cat").mkdir(parents=True)
    (src / "cat" / "a.jpg").write_bytes(b"not really a jpeg")
    return src


def test_prep_refuses_another_teams_root_before_the_session(
    store: Path, tmp_path: Path, no_session: list[Any]
) -> None:
    from gpuspark.data.prep import prep_images

    spec = make_spec(str(store))
    target = store / "teams" / "b" / "x"
    with pytest.raises(LaunchError, match="team a may not write"):
        prep_images(_image_folder(tmp_path), target, spec=spec, team="a")
    assert no_session == [] and not target.exists()


def test_prep_makes_the_group_dir_before_the_job_and_removes_it_on_failure(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuspark.data.prep import job as prep_job
    from gpuspark.data.prep import prep_images

    group = other_group()
    spec = make_spec(str(store), a=f'group = "{group.gr_name}"')
    target = store / "teams" / "a" / "cats"
    seen: list[tuple[int, int]] = []

    def job_session(*_a: Any, **_kw: Any) -> Any:
        info = target.stat()
        seen.append((info.st_gid, stat.S_IMODE(info.st_mode)))
        raise RuntimeError("no cluster in this test")

    monkeypatch.setattr(prep_job, "job_session", job_session)
    with pytest.raises(RuntimeError, match="no cluster"):
        prep_images(_image_folder(tmp_path), target, spec=spec, team="a")
    assert seen == [(group.gr_gid, 0o2750)]
    assert not store.exists()  # the failed job left the destination as it was


def test_train_refuses_a_checkpoint_dir_in_another_teams_root(store: Path) -> None:
    from gpuspark.train.recipes.config import RecipeConfig
    from gpuspark.train.recipes.driver import run

    spec = make_spec(str(store))
    for cfg in (
        RecipeConfig(data=str(store / "nothing"), checkpoint_dir=str(store / "teams/b/ck")),
        RecipeConfig(data=str(store / "nothing"), out=str(store / "teams/b/out")),
    ):
        with pytest.raises(LaunchError, match="team a may not write"):  # before the dataset
            run("tabular", cfg, spec=spec, team="a", local=True)
    assert not store.exists()


def test_cli_prep_into_another_teams_root_fails_before_spark(tmp_path: Path) -> None:
    store = tmp_path / "store"
    spec_file = tmp_path / "cluster.toml"
    text = default_spec_text().replace(_STORAGE, f'[storage]\nroot = "{store}"\n')
    text += '[[teams]]\nname = "a"\nguaranteed_gpus = 1\nmax_gpus = 2\n'
    text += '[[teams]]\nname = "b"\nguaranteed_gpus = 1\nmax_gpus = 2\n'
    spec_file.write_text(text)
    target = store / "teams" / "b" / "x"
    state = tmp_path / "state"
    state.mkdir()
    args = ["prep", "images", str(_image_folder(tmp_path)), str(target)]
    args += ["--spec", str(spec_file), "--team", "a", "--json"]
    code = (
        "import sys; from gpuspark.cli.main import main; rc = main(sys.argv[1:]);"
        "print('SPARK', 'pyspark' in sys.modules); sys.exit(rc)"
    )
    env = {**os.environ, "GPUSPARK_STATE_DIR": str(state), "GPUSPARK_LOG_DIR": str(state)}
    env.pop("GPUSPARK_SPEC", None)
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    want = f"team a may not write {target}: it is in team b's root ({target.parent})"
    # under --json the error is one JSON object on stdout (then this test's own SPARK line)
    error = json.loads(out.stdout[: out.stdout.rindex("SPARK")])
    assert error["error"].startswith(want) and error["exit_code"] == 1, out.stdout
    assert out.stderr.strip() == "", out.stderr
    assert "SPARK False" in out.stdout  # Spark never imported: no session, no cluster
    assert list(state.iterdir()) == [] and not target.exists() and not store.exists()


# --------------------------------------------------------------------------- the spec


def test_default_and_given_team_roots(store: Path) -> None:
    spec = make_spec(str(store) + "/", b='root = "/data/vision"')
    assert team_root(spec, "a") == f"{store}/teams/a"
    assert team_root(spec, spec.teams[1]) == "/data/vision"
    assert spec.teams[0].group is None and spec.teams[0].root is None


def test_two_teams_may_not_share_a_root() -> None:
    assert spec_error("/s", a='root = "/s/teams/b/"') == (
        'cluster.toml: teams[1].root (default "/s/teams/b") is the same as'
        ' teams[0].root="/s/teams/b/"; each team needs a root of its own'
    )
    assert spec_error("/s", a='root = "/d"', b='root = "/d/./"').startswith(
        'cluster.toml: teams[1].root="/d/./" is the same as teams[0].root="/d"'
    )


def test_team_roots_may_not_nest() -> None:
    assert spec_error("/s", a='root = "/d"', b='root = "/d/b"') == (
        'cluster.toml: teams[1].root="/d/b" lies inside teams[0].root="/d"; team roots must'
        " not nest"
    )
    assert spec_error("/s", a='root = "/s/teams/b/sub"') == (
        'cluster.toml: teams[0].root="/s/teams/b/sub" lies inside teams[1].root'
        ' (default "/s/teams/b"); team roots must not nest'
    )
    assert "must not nest" in spec_error("s3a://b/p", b='root = "s3://b/p/teams/a/x"')
    make_spec("/s", a='root = "/d/a"', b='root = "/d/ab"')  # siblings are fine


def test_bad_group_and_root_values_name_the_field() -> None:
    assert spec_error("/s", a='group = "a:b"') == (
        'cluster.toml: teams[0].group="a:b": must be a Unix group name such as'
        " 'radiology' (no ':', '/', newline or surrounding spaces)"
    )
    assert spec_error("/s", b='root = "1x://y"') == (
        'cluster.toml: teams[1].root="1x://y": must be a local path or a URL like'
        " hdfs://host/path or s3a://bucket/"
    )


def test_readme_team_entries_parse() -> None:
    readme = (ROOT / "docs" / "quotas.md").read_text()
    section = readme[readme.index("**Team separation.**") :]
    snippet = section[section.index("```toml\n") + 8 :]
    snippet = snippet[: snippet.index("```")]
    text = default_spec_text()
    assert text.count(_STORAGE) == 1
    spec = parse_spec(text.replace(_STORAGE, "") + snippet, source="docs/quotas.md")
    assert [t.name for t in spec.teams] == ["radiology", "vision"]
    assert spec.teams[0].group == "radiology"
    assert team_root(spec, "radiology") == "/shared/gpuspark/teams/radiology"
    assert team_root(spec, "vision") == "/shared/vision"
    with pytest.raises(LaunchError) as info:
        check_writes(spec, "vision", ["/shared/gpuspark/teams/radiology/ct"])
    assert str(info.value) in section  # the README quotes the real message
