"""Background processes gpuspark starts (the embedded cluster, ``monitor up``): spawning each
in its own process group, liveness, and stopping whole process groups."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

__all__ = ["group_alive", "pid_alive", "spawn_group", "terminate_groups"]


def spawn_group(
    cmd: list[str], log: Path, *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> int:
    """Start ``cmd`` in its own process group (so :func:`terminate_groups` stops it and its
    children), output appended to ``log``; return its pid."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    return proc.pid


def pid_alive(pid: int) -> bool:
    """True when ``pid`` runs (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); look at its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def terminate_groups(pids: list[int], timeout: float) -> None:
    """SIGTERM each process group, wait, then SIGKILL what is left."""
    for pid in pids:
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(group_alive(p) for p in pids):
        _reap(pids)
        time.sleep(0.2)
    for pid in pids:
        _signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(group_alive(p) for p in pids):
        time.sleep(0.1)
    _reap(pids)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """True while any process of the group ``pgid`` runs."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return pid_alive(pgid) or _any_member_alive(pgid)


def _any_member_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _reap(pids: list[int]) -> None:
    """Collect exited children of this process so they do not linger as zombies."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def machine_key() -> str:
    """This machine and file system as seen by a process: host name and boot id.

    Equal for processes on one machine that share its files (network namespaces included),
    different across machines and for containers (their own host name)."""
    import socket

    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            boot = fh.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"
