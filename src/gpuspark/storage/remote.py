"""Object stores and other remote file systems: is the client installed, can we write there,
and which credentials travel to the executors and ranks.

A URL destination is checked on the driver before any Spark job or rank starts
(:func:`check_writable`): the scheme's fsspec client must be installed, and one small object
is written and removed under the destination, which proves in one round trip that the bucket
exists, credentials were found and they may write there. Each failure is one line naming the
URL and the fix.

Credentials come from where each client looks by itself: the standard environment variables
and profile files (AWS, Google, Azure). :func:`credential_env` picks those variables out of
this process's environment so that a launch hands them to its ranks; :func:`redact` hides the
secret ones wherever a value is shown.
"""

from __future__ import annotations

import functools
import os
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gpuspark._util.extras import require
from gpuspark.errors import GpusparkError
from gpuspark.storage.files import filesystem, is_url, join

_T = TypeVar("_T")

__all__ = [
    "CREDENTIAL_VARIABLES",
    "check_filesystem",
    "check_writable",
    "credential_env",
    "is_secret",
    "redact",
    "scheme",
    "store_failure",
    "with_credentials",
]

_S3 = ("s3", "s3a", "s3n")
"""The schemes of S3 (Hadoop's spellings too), all served by s3fs (the ``[s3]`` extra)."""
_INSTALL = {
    "gs": ("gcsfs", "pip install gcsfs"),
    "gcs": ("gcsfs", "pip install gcsfs"),
    "abfs": ("adlfs", "pip install adlfs"),
    "abfss": ("adlfs", "pip install adlfs"),
    "az": ("adlfs", "pip install adlfs"),
    "hdfs": ("pyarrow", "install a Hadoop client with libhdfs (pyarrow's HadoopFileSystem)"),
    "alluxio": ("alluxiofs", "pip install alluxiofs"),
}
"""The client library of each other scheme, and how to install it."""

CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_CA_BUNDLE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
)
"""The standard variables the S3, GCS and Azure clients read: what a launch hands its ranks."""
_SECRET = re.compile(r"SECRET|TOKEN|PASSWORD|ACCOUNT_KEY|CONNECTION_STRING|SAS", re.IGNORECASE)
_REDACTED = "*****(redacted)"


def scheme(url: str) -> str:
    """The scheme of a URL, lower case, without fsspec chaining (``simplecache::s3://`` ->
    ``s3``)."""
    return url.split("::")[-1].partition("://")[0].lower()


def check_filesystem(url: str, what: str) -> None:
    """Raise a one-line :class:`GpusparkError` unless fsspec has a client for ``url``'s
    scheme installed; ``what`` names the input (``--checkpoint-dir``)."""
    import fsspec

    name = scheme(url)
    if name in _S3:
        require("s3fs", "s3", f"{what} {url}")
        return
    try:
        fsspec.get_filesystem_class(name)
    except ImportError as exc:
        library, remedy = _INSTALL.get(name, ("its fsspec client", "install it"))
        raise GpusparkError(
            f"{what} {url}: no client for {name}:// is installed ({library} is missing)",
            remedy=remedy,
        ) from exc
    except ValueError as exc:
        raise GpusparkError(
            f"{what} {url}: {name}:// is not a known storage scheme",
            remedy="use a local path, a file:// URL or s3://, gs://, abfs://, hdfs:// "
            "(docs/storage.md)",
        ) from exc


def check_writable(url: str, what: str) -> None:
    """Refuse a URL destination up front, in one line, unless its client is installed and a
    small object can be written (and removed) below it: a missing bucket, no credentials or
    no permission show here, not in the middle of a job."""
    if not is_url(url):
        return
    check_filesystem(url, what)
    probe = join(url, f".gpuspark-write-check-{uuid.uuid4().hex[:12]}")
    try:
        fs, inner = _probe_filesystem(probe)
        fs.pipe_file(inner, b"")
        fs.rm(inner)
    except Exception as exc:  # each client raises its own types: sorted by _explain
        message, remedy = _explain(exc)
        raise GpusparkError(f"{what} {url}: {message}", remedy=remedy) from exc


_PROBE_DEADLINE = {"connect_timeout": 10, "read_timeout": 20, "retries": {"max_attempts": 2}}
"""botocore settings of the write probe: an unreachable endpoint is one line within about
half a minute, not minutes of the SDK's default retries."""


def _probe_filesystem(url: str) -> tuple[Any, str]:
    """The file system of the probe: S3 with a short deadline, others as configured."""
    if scheme(url) in _S3:
        import fsspec

        fs = fsspec.filesystem("s3", skip_instance_cache=True, config_kwargs=_PROBE_DEADLINE)
        return fs, url.split("::")[-1].partition("://")[2]
    return filesystem(url)


def _explain(exc: BaseException) -> tuple[str, str]:
    """What a failed write probe means, and what to do."""
    kind = type(exc).__name__
    if kind in ("NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError"):
        return (
            "no credentials were found",
            "set the store's credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS, ...; docs/storage.md)",
        )
    if isinstance(exc, FileNotFoundError):
        return "the bucket does not exist", "create the bucket, or check the URL"
    if isinstance(exc, PermissionError):
        return (
            "permission denied (the credentials found may not write there)",
            "use credentials with write access to this bucket and prefix",
        )
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else kind
    return (
        f"the store cannot be written ({kind}: {text})",
        "check the URL, the endpoint (AWS_ENDPOINT_URL for S3-compatible stores) and the network",
    )


def credential_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The storage credential variables (:data:`CREDENTIAL_VARIABLES`) set in ``environ``
    (default: this process's environment)."""
    source = os.environ if environ is None else environ
    return {name: source[name] for name in CREDENTIAL_VARIABLES if source.get(name)}


def is_secret(name: str) -> bool:
    """Whether a variable or option named ``name`` holds a secret (its value is redacted)."""
    return bool(_SECRET.search(name))


def redact(values: Mapping[str, str]) -> dict[str, str]:
    """``values`` with every secret one (:func:`is_secret`) replaced by a marker."""
    return {k: (_REDACTED if is_secret(k) else v) for k, v in values.items()}


def with_credentials(fn: Callable[..., _T], url: str) -> Callable[..., _T]:
    """``fn`` for a Spark task that reads or writes ``url``: the driver's store credential
    variables (:func:`credential_env`) are set in the task's process first. A running
    cluster's executors were started with their own environment; the values travel inside
    the task, never in the Spark conf (which the Spark UI and event logs show). ``fn`` as it
    is for a local path or when no such variable is set."""
    creds = credential_env() if is_url(url) else {}
    return functools.partial(_with_env, creds, fn) if creds else fn


def _with_env(env: Mapping[str, str], fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    os.environ.update(env)
    return fn(*args, **kwargs)


_STORE_CLIENTS = frozenset({"botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "adlfs"})
"""Top-level packages whose exceptions are a store's (or its network's) failure."""


def store_failure(exc: BaseException) -> GpusparkError | None:
    """A one-line error for an exception of an object store's client (after the client's
    own retries: the store or the network to it failed), or ``None`` for any other one."""
    package = type(exc).__module__.split(".")[0]
    if package not in _STORE_CLIENTS and not package.startswith(("google", "azure")):
        return None
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return GpusparkError(
        f"the object store failed after its client's retries ({type(exc).__name__}: {text})",
        remedy="check the store's endpoint (AWS_ENDPOINT_URL for S3-compatible stores), the "
        "network and the store's status, then run the command again; a write that failed is "
        "not visible (its manifest or marker is written last)",
    )
