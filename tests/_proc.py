"""Test helpers that read ``/proc``: process trees, process names, listening TCP sockets.

Importable from every test module (pytest puts ``tests/`` on ``sys.path`` for its conftest).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

WILDCARD = ("0.0.0.0", "::")
"""The addresses that mean "every interface"."""


def _children() -> dict[int, set[int]]:
    tree: dict[int, set[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # the process ended meanwhile
            continue
        tree.setdefault(ppid, set()).add(int(entry.name))
    return tree


def descendants(roots: Iterable[int]) -> set[int]:
    """``roots`` and every process below them."""
    tree, todo = _children(), list(roots)
    found = set(todo)
    while todo:
        for child in tree.get(todo.pop(), set()) - found:
            found.add(child)
            todo.append(child)
    return found


def comm(pid: int) -> str:
    """The process's name (``/proc/<pid>/comm``), ``""`` when it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def command(pid: int) -> str:
    """``[comm] cmdline``, a Java command from its main class on (past classpath and flags)."""
    proc = Path(f"/proc/{pid}")
    try:
        name = (proc / "comm").read_text().strip()
        args = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    if "-cp" in args[:-1]:
        rest = args[args.index("-cp") + 2 :]
        args = args[:1] + rest[next((i for i, a in enumerate(rest) if a[:1] != "-"), 0) :]
    return f"[{name}] " + " ".join(args).strip()[:200]


def address(hex_addr: str) -> str:
    """A ``/proc/net/tcp{,6}`` local address (little-endian words) as text; IPv4-mapped IPv6
    (as Java binds) as IPv4."""
    raw = b"".join(bytes.fromhex(hex_addr[i : i + 8])[::-1] for i in range(0, len(hex_addr), 8))
    ip = ipaddress.ip_address(raw)
    return str(getattr(ip, "ipv4_mapped", None) or ip)


def listening() -> dict[str, tuple[str, int]]:
    """Socket inode -> (local address, port) of every listening TCP socket."""
    out: dict[str, tuple[str, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                addr, port = fields[1].split(":")
                out[fields[9]] = (address(addr), int(port, 16))
    return out


def listeners_of(pids: Iterable[int]) -> set[tuple[int, str, int]]:
    """(pid, address, port) of each listening socket the ``pids`` hold."""
    sockets, out = listening(), set()
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
                out.add((pid, *sockets[inode]))
    return out
