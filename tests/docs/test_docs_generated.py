"""The generated parts of the documentation site (``docs/gen_reference.py``, an MkDocs hook):
the CLI reference holds every command's ``--help``, the environment page every registered
variable, the doctor page the catalogue; placeholders expand, unknown ones are refused; the
README included as the home page links into the site. ``mkdocs build --strict`` itself runs in
``make lint`` (``make docs``), and here with ``-m slow``."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> ModuleType:
    path = ROOT / "docs" / "gen_reference.py"
    spec = importlib.util.spec_from_file_location("gen_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _hook()


def test_the_cli_reference_has_every_command_and_its_help() -> None:
    tree = GEN.command_tree()
    text = GEN.cli_reference()
    assert len(tree) >= 40  # gpuspark, its groups and their commands
    for words, command in tree:
        name = " ".join(words)
        assert f"\n## {name} {{ #{'-'.join(words)} }}\n" in text, name
        assert f"Usage: {name} " in text, name
        for param in command.params:
            for opt in (o for o in param.opts if o.startswith("--")):
                if not getattr(param, "hidden", False):
                    assert opt in GEN.help_text(words, command), (name, opt)
    index = text.split("\n## ", 1)[0]
    assert index.count("](#gpuspark-") == len(tree) - 1


def test_the_help_is_the_width_it_says() -> None:
    words, command = next((w, c) for w, c in GEN.command_tree() if w[1:] == ["cluster", "up"])
    lines = GEN.help_text(words, command).splitlines()
    assert max(len(line) for line in lines) <= GEN.HELP_WIDTH
    assert any("[default:" in line for line in lines)


def test_the_environment_page_is_the_registry() -> None:
    from gpuspark._util import envvars

    table = GEN.envvars_reference()
    assert table == envvars.markdown_table()
    assert {v.name for v in envvars.ALL} == set(re.findall(r"`(GPUSPARK_[A-Z0-9_]+)`", table))


def test_the_doctor_page_is_the_catalogue() -> None:
    from gpuspark.doctor.catalogue import load_catalogue

    table = GEN.doctor_catalogue()
    for entry in load_catalogue().entries:
        assert f"(`{entry.id}`)" in table, entry.id


def test_placeholders_expand_and_unknown_ones_are_refused() -> None:
    page = "# t\n\n<!-- gpuspark:generate envvars -->\n\ntail\n"
    out = GEN.expand(page)
    assert (
        "| `GPUSPARK_SPEC` |" in out and out.endswith("tail\n") and "gpuspark:generate" not in out
    )
    with pytest.raises(ValueError, match="not one of"):
        GEN.expand("<!-- gpuspark:generate nothing -->")
    with pytest.raises(ValueError, match="not one of"):
        GEN.expand("<!-- gpuspark:include pyproject.toml -->")


def test_every_placeholder_of_the_pages_is_known() -> None:
    for page in sorted((ROOT / "docs").rglob("*.md")):
        GEN.expand(page.read_text(encoding="utf-8"))  # raises on an unknown one


def test_the_readme_as_home_page_links_into_the_site() -> None:
    home = GEN.include("README.md")
    assert "](docs/" not in home and "](concepts.md)" in home
    assert "](changelog.md)" in home
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", home)
    local = [link for link in links if "://" not in link]
    missing = [link for link in local if not (ROOT / "docs" / link).is_file()]
    assert not missing, f"README links that are no page of the site: {missing}"


def test_sphinx_roles_are_stripped_from_docstrings() -> None:
    html = "<p>see :func:<code>~gpuspark.launch.run</code> and :class:<code>a.B</code></p>"
    assert GEN.strip_roles(html) == "<p>see <code>run</code> and <code>a.B</code></p>"


@pytest.mark.slow  # about 30 s: the whole site, API reference included
def test_the_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs, "mkdocs is not installed: pip install -e .[dev]"
    proc = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    cli = (tmp_path / "site" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "Usage: gpuspark cluster up" in cli
