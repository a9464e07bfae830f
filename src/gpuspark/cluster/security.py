"""Spark security from a cluster spec: the shared secret, RPC and disk encryption, UI ACLs.

Spark standalone authenticates every RPC connection (driver, master, workers, executors) with
one shared secret, ``spark.authenticate.secret``, which every daemon and every application of
the cluster must hold; with ``spark.network.crypto.enabled`` the same handshake sets up AES
encryption of the traffic, and ``spark.io.encryption.enabled`` encrypts shuffle and spill files
on local disks. UI ACLs (``spark.acls.enable`` with admin, modify and view lists) decide who may
see or kill an application once a UI authentication filter names the user.

gpuspark keeps the secret in one file readable by its owner only (mode 0600), generates it
when missing, refuses a file others can read, and never prints it: rendered files and session
plans show :data:`REDACTED` in its place.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from gpuspark.errors import ClusterError
from gpuspark.spec import ClusterSpec

__all__ = [
    "REDACTED",
    "SECRET_KEY",
    "ensure_secret",
    "missing_secret",
    "read_secret",
    "redact",
    "security_conf",
]

SECRET_KEY = "spark.authenticate.secret"
REDACTED = "<redacted>"
_SECRET_BYTES = 32


def _check_private(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ClusterError(
            f"{path}: the Spark secret is readable by others (mode {mode:04o})",
            remedy=f"chmod 600 {path}",
        )


def read_secret(path: str | os.PathLike[str]) -> str:
    """The shared secret in ``path``; refuses a missing, empty or group/other-readable file."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ClusterError(
            f"{p}: no Spark secret file",
            remedy="create one with `gpuspark render spark --secure -o DIR` (or copy the "
            "cluster's secret there, mode 600)",
        )
    _check_private(p)
    secret = p.read_text(encoding="utf-8").strip()
    if not secret:
        raise ClusterError(
            f"{p}: the Spark secret file is empty", remedy=f"delete {p} and render again"
        )
    return secret


def ensure_secret(path: str | os.PathLike[str]) -> tuple[str, bool]:
    """``(secret, created)``: the secret in ``path``, generated (256 random bits, hex) and
    written with mode 0600 when the file does not exist. Written to a temp file created 0600,
    then renamed: the secret is never readable by others, not even for a moment."""
    p = Path(path).expanduser()
    if p.exists():
        return read_secret(p), False
    p.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_hex(_SECRET_BYTES)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(secret + "\n")
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return secret, True


def missing_secret(master: str, state_dir: str | os.PathLike[str]) -> ClusterError:
    """The one-line error for a job without the secret against a master that demands it.

    A gpuspark session holds the secret when it finds the embedded cluster of ``master`` in
    its state directory (``<state dir>/spark-secret``, written by ``cluster up --secure``) or
    when the spec's ``[security]`` is enabled (its ``secret_file``)."""
    return ClusterError(
        f"the Spark master at {master} requires authentication (spark.authenticate: a secure "
        "cluster) and this job holds no shared secret; gpuspark reads it from spark-secret "
        f"in the embedded cluster's state dir (GPUSPARK_STATE_DIR; this job looked in "
        f"{state_dir}, which holds no cluster of that master) or from the spec's [security] "
        "secret_file when enabled = true",
        remedy="run the job with GPUSPARK_STATE_DIR set to the cluster's state dir, or set "
        "[security] enabled = true and secret_file = a copy of the cluster's secret (mode 600)",
    )


def security_conf(spec: ClusterSpec, secret: str | None = None) -> dict[str, str]:
    """Spark properties of the spec's ``[security]`` (empty when it is off). ``secret`` is
    the shared secret's value (``None``: :data:`REDACTED`, for printing)."""
    sec = spec.security
    if not sec.enabled:
        return {}
    conf = {
        "spark.authenticate": "true",
        SECRET_KEY: secret if secret is not None else REDACTED,
        "spark.network.crypto.enabled": _bool(sec.network_crypto),
        "spark.io.encryption.enabled": _bool(sec.io_encryption),
    }
    if sec.acls:
        members = sorted({m for team in spec.teams for m in team.members} | set(sec.admins))
        conf["spark.acls.enable"] = "true"
        conf["spark.admin.acls"] = ",".join(sorted(sec.admins))
        conf["spark.modify.acls"] = ",".join(sorted(sec.admins))
        conf["spark.ui.view.acls"] = ",".join(members)
    if sec.ui_keystore:
        conf["spark.ssl.ui.enabled"] = "true"
        conf["spark.ssl.ui.keyStore"] = sec.ui_keystore
        conf["spark.ssl.ui.keyStoreType"] = sec.ui_keystore_type
    return conf


def redact(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with the secret (and any ``*password*`` value) replaced by :data:`REDACTED`."""
    return {
        k: REDACTED if k == SECRET_KEY or "password" in k.lower() else v for k, v in conf.items()
    }


def _bool(value: bool) -> str:
    return "true" if value else "false"
