"""``make demo`` listens on loopback only: no gpuspark or Spark socket on 0.0.0.0 or ``::``.

The demo runs as a subprocess (its own embedded cluster under ``<out>/cluster``) while the
test polls the listening TCP sockets (``/proc/net/tcp{,6}``) of it and all its descendants:
the Spark master and workers, executors, the driver, the training ranks.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

WILDCARD = ("0.0.0.0", "::")
Listener = tuple[int, str, int, str]
"""(pid, local address, port, command) of a listening socket."""


def _address(hex_addr: str) -> str:
    """``/proc/net/tcp{,6}`` local address (little-endian words) as text; IPv4-mapped IPv6
    (as Java binds) as IPv4."""
    raw = b"".join(bytes.fromhex(hex_addr[i : i + 8])[::-1] for i in range(0, len(hex_addr), 8))
    ip = ipaddress.ip_address(raw)
    return str(getattr(ip, "ipv4_mapped", None) or ip)


def _listening() -> dict[str, tuple[str, int]]:
    """Socket inode -> (local address, port) of every listening TCP socket."""
    out: dict[str, tuple[str, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                addr, port = fields[1].split(":")
                out[fields[9]] = (_address(addr), int(port, 16))
    return out


def _descendants(root: int) -> set[int]:
    children: dict[int, set[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, set()).add(int(entry.name))
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), set()) - found:
            found.add(child)
            todo.append(child)
    return found


def _command(pid: int) -> str:
    """``[comm] cmdline``, a Java command from its main class on (past classpath and flags)."""
    proc = Path(f"/proc/{pid}")
    try:
        comm = (proc / "comm").read_text().strip()
        args = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    if "-cp" in args[:-1]:
        rest = args[args.index("-cp") + 2 :]
        args = args[:1] + rest[next((i for i, a in enumerate(rest) if a[:1] != "-"), 0) :]
    return f"[{comm}] " + " ".join(args).strip()[:200]


def _listeners_of(pids: set[int]) -> set[Listener]:
    """(pid, address, port, cmdline) of each listening socket the ``pids`` hold."""
    sockets, out = _listening(), set[Listener]()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:  # the process ended
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:  # the fd closed meanwhile
                continue
            inode = link[len("socket:[") : -1] if link.startswith("socket:[") else ""
            if inode in sockets:
                out.add((pid, *sockets[inode], _command(pid)))
    return out


def _stop_leftover_cluster(state_dir: Path) -> None:
    """Stop the embedded cluster the demo started if it left one (it crashed or timed out)."""
    if (state_dir / "cluster.json").exists():
        from gpuspark.cluster.local import LocalCluster

        LocalCluster(state_dir=state_dir).stop()


def _run_watched(argv: list[str], log: Path, cluster_dir: Path) -> tuple[int, set[Listener]]:
    """Run ``argv`` to its end; return its exit status and every listener its process tree
    held at some poll (every 0.3 s)."""
    seen: set[Listener] = set()
    with open(log, "wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 480
        while proc.poll() is None and time.monotonic() < deadline:
            seen |= _listeners_of(_descendants(proc.pid))
            time.sleep(0.3)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _stop_leftover_cluster(cluster_dir)
    return proc.returncode, seen


@pytest.mark.spark
@pytest.mark.slow
def test_make_demo_listens_on_loopback_only(tmp_path: Path) -> None:
    """Acceptance: ``ss -ltn`` during ``make demo`` shows no gpuspark or Spark listener on
    0.0.0.0 (here a small demo, 16 studies and 1 epoch: 100-180 s on 2 cores, 320 s at load 20)."""
    out, log = tmp_path / "demo", tmp_path / "demo.log"
    argv = [sys.executable, "-m", "gpuspark.cli.main", "demo", "--studies", "16", "--epochs", "1"]
    rc, seen = _run_watched([*argv, "--out", str(out)], log, out / "cluster")
    listed = "\n".join(f"  {a}:{port} pid {pid} {cmd}" for pid, a, port, cmd in sorted(seen))
    print(f"listeners of the demo's process tree:\n{listed}")
    assert rc == 0, f"gpuspark demo exited {rc}:\n{log.read_text(errors='replace')[-3000:]}"
    # not vacuous: the polls saw the Spark master and a training rank listen, among others
    assert len({port for _pid, _a, port, _cmd in seen}) >= 3, listed
    assert any("deploy.master.Master" in cmd for *_x, cmd in seen), listed
    assert any(cmd.startswith("[gpuspark-rank") for *_x, cmd in seen), listed
    wide = [f"  pid {pid} port {port} on {a}: {cmd}" for pid, a, port, cmd in seen if a in WILDCARD]
    assert not wide, "listening on every interface:\n" + "\n".join(sorted(wide))
