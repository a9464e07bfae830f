"""``gpuspark cluster up --secure --connect``: the Connect server joins the secure cluster
with its shared secret, and its clients authenticate with a token (mode 600) that gpuspark
sessions read; a client without it is refused in one line."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cli.main import main

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BIN = Path(sys.executable).parent
SCRIPT = "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"


def _gpuspark(args: list[str], cwd: Path, state: str) -> Any:
    env = {**os.environ, "GPUSPARK_STATE_DIR": state, "GPUSPARK_LOG_DIR": str(cwd / "logs")}
    cmd = [str(BIN / "gpuspark"), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_secure_connect_server_takes_only_token_holders(tmp_path: Path, capsys: Any) -> None:
    state = str(tmp_path / "state")
    argv = ["cluster", "up", "--secure", "--connect", "--workers", "1", "--cores", "2"]
    assert main([*argv, "--gpus", "1", "--memory", "2g", "--state-dir", state, "--json"]) == 0
    try:
        info = json.loads(capsys.readouterr().out)
        url, port = info["connect_url"], info["connect_url"].rsplit(":", 1)[1]
        assert url.startswith("sc://localhost:") and info["connect_alive"] and info["secure"]
        token = Path(state) / "connect-token"
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        assert token.read_text().strip() not in Path(info["connect_log"]).read_text()
        (tmp_path / "ranks.py").write_text(SCRIPT)
        cpu = ["launch", "-n", "2", "--gpus-per-process", "0", "ranks.py"]
        ok = _gpuspark(cpu, tmp_path, state)
        assert ok.returncode == 0, ok.stderr[-3000:]
        assert "[rank 1] rank 1 of 2" in ok.stdout
        stranger = ["launch", "-n", "2", "--master", f"sc://127.0.0.1:{port}", "ranks.py"]
        refused = _gpuspark(stranger, tmp_path, state)
        assert refused.returncode == 1
        errors = [ln for ln in refused.stderr.splitlines() if ln.strip()]
        assert len(errors) == 1, refused.stderr
        assert "refused this session: No authentication token provided" in errors[0]
    finally:
        main(["cluster", "down", "--state-dir", state])
