"""A RECORDING STAND-IN for the Kubernetes API server, for tests only: it is NOT Kubernetes.

No API server can run on the test machines, so this small HTTPS server answers what gpuspark's
client (lightkube) and Spark's (fabric8) use, and records every request (method, path, query,
JSON body, client certificate name, bearer token) for assertions: discovery (``/api``,
``/apis``, ``/api/v1``, ``/apis/<group>[/<version>]``) of :func:`served`; objects in memory by
apiVersion/plural/namespace/name with GET (one; lists with a basic ``labelSelector``), POST
(assigns ``uid``, ``resourceVersion``, ``creationTimestamp``), PUT, PATCH (merge and strategic
merge both applied as a JSON merge patch; a server-side apply, content type
``application/apply-patch+yaml`` with a JSON body as fabric8 sends it, creates a missing
object as the API server does), DELETE (one; a collection by label); and
``?watch=true``: a chunked stream of ``{"type": "ADDED", "object": ...}`` lines for the current
objects, then one per change, until the client goes (seen at the next write) or the stand-in
stops. It can require a client certificate or bearer tokens (:meth:`StandIn.require`) and
refuse a verb with 403 (:meth:`StandIn.forbid`). Nothing runs: pods stay as posted, with no
status, scheduling or admission. :func:`make_pki` writes a throwaway CA, server and client
certificate.
"""

from __future__ import annotations

import copy
import datetime as dt
import http.server
import json
import re
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

KUEUE = "kueue.x-k8s.io"


@dataclass(frozen=True)
class Resource:
    """One resource the stand-in serves."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def served(kueue_versions: Iterable[str]) -> list[Resource]:
    """Core resources, NetworkPolicies (Spark 4's submission client applies one per driver),
    Kueue's in each of ``kueue_versions``, and the Spark operator's."""
    core = ["Pod", "Service", "ConfigMap", "PersistentVolumeClaim", "Secret", "ServiceAccount"]
    kueue = (("ClusterQueue", False), ("LocalQueue", True), ("Workload", True))
    return [
        *(Resource("", "v1", kind, f"{kind.lower()}s") for kind in core),
        Resource("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies"),
        *(Resource(KUEUE, v, k, f"{k.lower()}s", ns) for v in kueue_versions for k, ns in kueue),
        Resource("sparkoperator.k8s.io", "v1beta2", "SparkApplication", "sparkapplications"),
    ]


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class Pki:
    """PEM files: the CA, the server's certificate (127.0.0.1, localhost) and a client's."""

    ca_file: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_name: str


def make_pki(folder: Path, client_name: str = "gpuspark-tests") -> Pki:
    """A throwaway CA and two certificates it signs, written under ``folder``."""
    import ipaddress

    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_key, ca = _issue("stand-in CA", None, ca=True)
    server_key, server = _issue(
        "127.0.0.1",
        (ca, ca_key),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
    )
    client_key, client = _issue(client_name, (ca, ca_key), usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / n for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")]
    for path, item in zip(paths, (ca, server, server_key, client, client_key), strict=True):
        path.write_bytes(_pem(item))
    return Pki(*paths, client_name=client_name)


def _issue(name: str, issuer: Any, *, ca: bool = False, usage: Any = None, sans: Any = ()) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_cert, issuer_key = issuer if issuer else (None, key)
    now = dt.datetime.now(dt.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return key, builder.sign(issuer_key, hashes.SHA256())


def _pem(item: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization as ser

    if hasattr(item, "private_bytes"):  # PKCS#8: read by Python's ssl and by Java (fabric8)
        return bytes(
            item.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption())
        )
    return bytes(item.public_bytes(ser.Encoding.PEM))


# --------------------------------------------------------------------------- objects

Key = tuple[str, str, str, str]
"""apiVersion, plural, namespace ("" when cluster-scoped), name."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (strategic merge patches are treated the same here)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = merge_patch(out.get(name), value)
    return out


def label_matcher(selector: str) -> Callable[[dict[str, str]], bool]:
    """``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, ``a in (x,y)``, ``a notin (x,y)``, ANDed."""
    tests: list[Callable[[dict[str, str]], bool]] = []
    for term in (t.strip() for t in re.split(r",(?![^(]*\))", selector or "") if t.strip()):
        found = re.fullmatch(r"([\w./-]+)\s+(in|notin)\s*\((.*)\)", term)
        if found:
            key, op, values = found[1], found[2], {v.strip() for v in found[3].split(",")}
            tests.append(lambda lab, k=key, o=op, vs=values: (lab.get(k) in vs) == (o == "in"))
        elif term.startswith("!"):
            tests.append(lambda lab, k=term[1:]: k not in lab)
        elif "!=" in term:
            key, value = term.split("!=", 1)
            tests.append(lambda lab, k=key.strip(), v=value.strip(): lab.get(k) != v)
        elif "=" in term:
            key, value = re.split(r"==?", term, maxsplit=1)
            tests.append(lambda lab, k=key.strip(), v=value.strip(): lab.get(k) == v)
        else:
            tests.append(lambda lab, k=term: k in lab)
    return lambda labels: all(test(labels) for test in tests)


class Store:
    """Objects by :data:`Key`, and the change events watchers stream."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.events: list[tuple[int, str, Key, dict[str, Any]]] = []
        self.version = 0
        self.changed = threading.Condition()
        self.closed = False

    def save(self, event: str, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        """Store (or drop, for ``DELETED``) ``obj`` with a new resourceVersion; wake watchers."""
        with self.changed:
            self.version += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
            if event == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = obj
            self.events.append((self.version, event, key, copy.deepcopy(obj)))
            self.changed.notify_all()
            return copy.deepcopy(obj)

    def matching(self, prefix: tuple[str, str, str | None], selector: str) -> list[Key]:
        """Keys of ``(apiVersion, plural, namespace or None for all)`` whose labels match."""
        match = label_matcher(selector)
        with self.changed:
            return [
                key
                for key, obj in self.objects.items()
                if key[:2] == prefix[:2]
                and prefix[2] in (None, key[2])
                and match(obj.get("metadata", {}).get("labels") or {})
            ]


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _new_object(res: Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(body)
    meta = obj.setdefault("metadata", {})
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
    if res.namespaced:
        meta["namespace"] = namespace
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    obj.setdefault("apiVersion", res.api_version)
    obj.setdefault("kind", res.kind)
    return obj


# --------------------------------------------------------------------------- the server


@dataclass
class Request:
    """One request as the stand-in saw it. ``user``: the client certificate's common name;
    ``token``: the bearer token ("" when none)."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    user: str = ""
    token: str = ""


@dataclass
class Route:
    """What a path names: a discovery document, or a resource (and maybe one object)."""

    doc: Any = None
    res: Resource | None = None
    namespace: str | None = None
    name: str | None = None


class StandIn:
    """The stand-in server; ``start()`` it (or use ``with``), then point clients at ``url``."""

    def __init__(self, pki: Pki, kueue_versions: tuple[str, ...] = ("v1beta1", "v1beta2")):
        self.pki, self.kueue_versions = pki, kueue_versions
        self.ca_file, self.client_cert, self.client_key = (
            pki.ca_file,
            pki.client_cert,
            pki.client_key,
        )
        self.resources = served(kueue_versions)
        self.requests: list[Request] = []
        self.store = Store()
        self.need_cert, self.tokens = False, set[str]()
        self.forbidden: set[tuple[str, str]] = set()
        self._httpd: http.server.ThreadingHTTPServer | None = None

    # -- set-up ------------------------------------------------------------------------------
    def require(self, *, cert: bool = False, tokens: Iterable[str] = ()) -> None:
        """Answer 401 unless a request has a client certificate (``cert``) or one of ``tokens``."""
        self.need_cert, self.tokens = cert, set(tokens)

    def forbid(self, verb: str, plural: str) -> None:
        """Answer 403 (as RBAC would) to ``verb`` (get, list, create, …) on ``plural``."""
        self.forbidden.add((verb, plural))

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Seed an object (not recorded as a request)."""
        group_version, kind = obj["apiVersion"], obj["kind"]
        res = next(r for r in self.resources if (r.api_version, r.kind) == (group_version, kind))
        namespace = obj.get("metadata", {}).get("namespace", "default") if res.namespaced else ""
        created = _new_object(res, namespace, obj)
        key = (res.api_version, res.plural, namespace, created["metadata"]["name"])
        return self.store.save("ADDED", key, created)

    # -- what clients need ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the stand-in first"
        return f"https://127.0.0.1:{self._httpd.server_address[1]}"

    def posted(self, plural: str) -> list[Any]:
        """Bodies of the recorded POSTs that create ``plural`` objects."""
        return [
            r.body for r in list(self.requests) if r.method == "POST" and r.path.endswith(plural)
        ]

    def wait_for(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until ``condition()`` holds after some change."""
        deadline = time.monotonic() + timeout
        with self.store.changed:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.store.changed.wait(min(left, 0.5))
        return True

    # -- life ----------------------------------------------------------------------------------
    def start(self) -> StandIn:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.pki.server_cert, self.pki.server_key)
        ctx.load_verify_locations(self.pki.ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL  # as kube-apiserver: a certificate is one way in
        handler = type("Handler", (_Handler,), {"standin": self})
        self._httpd = _TLSServer(("127.0.0.1", 0), handler, ctx)
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        with self.store.changed:
            self.store.closed = True
            self.store.changed.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- answers -------------------------------------------------------------------------------
    def route(self, path: str) -> Route | None:
        parts = [p for p in path.split("/") if p]
        if parts == ["api"]:
            return Route(doc={"kind": "APIVersions", "versions": ["v1"]})
        if parts == ["apis"]:
            groups = sorted({r.group for r in self.resources if r.group})
            return Route(doc={"kind": "APIGroupList", "groups": [self._group(g) for g in groups]})
        if parts[:1] == ["api"] and len(parts) > 1:
            group, rest = "", parts[1:]
        elif parts[:1] == ["apis"] and len(parts) > 1:
            group, rest = parts[1], parts[2:]
            if not rest:
                known = any(r.group == group for r in self.resources)
                return Route(doc=self._group(group)) if known else None
        else:
            return None
        version, rest = rest[0], rest[1:]
        if not rest:
            found = [r for r in self.resources if (r.group, r.version) == (group, version)]
            return Route(doc=_resource_list(found)) if found else None
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 2:
            return None  # no subresources (status, log, exec, …)
        for res in self.resources:
            if (res.group, res.version, res.plural) == (group, version, rest[0]):
                return Route(res=res, namespace=namespace, name=rest[1] if len(rest) > 1 else None)
        return None

    def _group(self, group: str) -> dict[str, Any]:
        versions = list(dict.fromkeys(r.version for r in self.resources if r.group == group))
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in reversed(versions)]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": entries,
            "preferredVersion": entries[0],
        }

    def answer(
        self, method: str, route: Route, query: dict[str, str], body: Any, *, apply: bool = False
    ) -> Any:
        """(HTTP code, JSON document) for one non-watch request on a resource; ``apply``: a
        server-side apply PATCH (creates the object when missing)."""
        res = route.res
        assert res is not None
        namespace = route.namespace if res.namespaced else ""
        key = (res.api_version, res.plural, namespace or "", route.name or "")
        current = self.store.objects.get(key)
        selected = self.store.matching((*key[:2], namespace), query.get("labelSelector", ""))
        if route.name is None and method == "GET":
            items = [self.store.objects[k] for k in selected if k in self.store.objects]
            meta = {"resourceVersion": str(self.store.version)}
            kind = f"{res.kind}List"
            return 200, {
                "kind": kind,
                "apiVersion": res.api_version,
                "metadata": meta,
                "items": items,
            }
        if route.name is None and method == "POST":
            obj = _new_object(res, namespace or "", body or {})
            key = (*key[:3], obj["metadata"].get("name", ""))
            if key in self.store.objects:
                return 409, _status(409, "AlreadyExists", f'{res.plural} "{key[3]}" already exists')
            return 201, self.store.save("ADDED", key, obj)
        if route.name is None and method == "DELETE":
            for found in selected:
                self.store.save("DELETED", found, self.store.objects[found])
            return 200, _status(200, "", "deleted")
        if current is None and apply and method == "PATCH" and isinstance(body, dict):
            obj = _new_object(res, namespace or "", body)
            obj["metadata"]["name"] = route.name
            return 201, self.store.save("ADDED", key, obj)
        if current is None:
            return 404, _status(404, "NotFound", f'{res.plural} "{route.name}" not found')
        if method == "GET":
            return 200, current
        if method == "DELETE":
            return 200, self.store.save("DELETED", key, current)
        if not isinstance(body, dict):  # a JSON patch (a list of operations)
            return 415, _status(415, "UnsupportedMediaType", "only merge patches are served here")
        changed = merge_patch(current, body) if method == "PATCH" else dict(body)
        changed["metadata"] = {**current["metadata"], **(changed.get("metadata") or {})}
        return 200, self.store.save("MODIFIED", key, changed)


def _resource_list(found: list[Resource]) -> dict[str, Any]:
    verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": found[0].api_version,
        "resources": [
            {"name": r.plural, "namespaced": r.namespaced, "kind": r.kind, "verbs": verbs}
            for r in found
        ],
    }


def _verb(method: str, route: Route, watch: bool) -> str:
    if watch:
        return "watch"
    one = route.name is not None
    return {
        "GET": "get" if one else "list",
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if one else "deletecollection",
    }[method]


class _TLSServer(http.server.ThreadingHTTPServer):
    """TLS on each connection in its own thread, so a slow handshake blocks no one."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Any, ctx: ssl.SSLContext) -> None:
        super().__init__(address, handler)
        self.ctx = ctx

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            secure = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            super().finish_request(secure, client_address)
        finally:
            secure.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    standin: StandIn

    def _any(self) -> None:
        self._serve(self.command)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

    def log_message(self, *args: Any) -> None:
        return

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        request = Request(method, url.path, query, self._body(), *self._who())
        self.standin.requests.append(request)
        if not self._admitted(request):
            return self._send(401, _status(401, "Unauthorized", "Unauthorized"))
        route = self.standin.route(url.path)
        if route is None:
            missing = f"the server could not find the requested resource ({url.path})"
            return self._send(404, _status(404, "NotFound", missing))
        if route.res is None:
            return self._send(200, route.doc)
        watch = method == "GET" and query.get("watch") in ("true", "1")
        verb = _verb(method, route, watch)
        if (verb, route.res.plural) in self.standin.forbidden:
            return self._send(403, _status(403, "Forbidden", _forbidden(request, verb, route)))
        if watch and self.headers.get("Upgrade", "").lower() == "websocket":
            # No WebSocket here: a complete 200 makes fabric8 fall back to a plain HTTP watch,
            # as it does behind `kubectl proxy` (kubernetes/kubernetes#25126).
            return self._send(200, _status(200, "", "no WebSocket watches: use HTTP streaming"))
        if watch:
            return self._watch(route, query)
        apply = self.headers.get("Content-Type", "").startswith("application/apply-patch")
        self._send(*self.standin.answer(method, route, query, request.body, apply=apply))

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _who(self) -> tuple[str, str]:
        cert = self.connection.getpeercert() if hasattr(self.connection, "getpeercert") else None
        names = [v for rdn in (cert or {}).get("subject", ()) for k, v in rdn if k == "commonName"]
        auth = self.headers.get("Authorization", "")
        return (names[0] if names else ""), auth.removeprefix("Bearer ").strip()

    def _admitted(self, request: Request) -> bool:
        standin = self.standin
        if not standin.need_cert and not standin.tokens:
            return True
        return bool(standin.need_cert and request.user) or request.token in standin.tokens

    def _send(self, code: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _watch(self, route: Route, query: dict[str, str]) -> None:
        """Stream events of the resource (in the namespace, matching the labels) as JSON lines."""
        assert route.res is not None
        store, prefix = self.standin.store, (route.res.api_version, route.res.plural)
        matches = label_matcher(query.get("labelSelector", ""))
        since = int(query.get("resourceVersion") or 0)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 3600)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with store.changed:
            sent = store.version
            now = [o for k, o in store.objects.items() if k[:2] == prefix]
        lines = [("ADDED", o) for o in now if int(o["metadata"]["resourceVersion"]) > since]
        while not store.closed and time.monotonic() < deadline:
            for event, obj in lines:
                meta = obj.get("metadata", {})
                if route.namespace not in (None, meta.get("namespace")):
                    continue
                line = json.dumps({"type": event, "object": obj}) + "\n"
                if matches(meta.get("labels") or {}) and not self._chunk(line):
                    return
            lines, sent = self._events_after(sent, prefix)
        self._chunk("")

    def _events_after(self, version: int, prefix: tuple[str, str]) -> tuple[list[Any], int]:
        """The events of ``prefix`` after ``version`` (waiting up to 0.5 s for one), and the
        store's version now."""
        store = self.standin.store
        with store.changed:
            store.changed.wait_for(lambda: store.version > version or store.closed, timeout=0.5)
            events = [(e, o) for v, e, k, o in store.events if v > version and k[:2] == prefix]
            return events, store.version

    def _chunk(self, text: str) -> bool:
        data = text.encode()
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            return True
        except OSError:
            return False


def _forbidden(request: Request, verb: str, route: Route) -> str:
    """The message kube-apiserver's RBAC gives."""
    assert route.res is not None
    group = route.res.group
    full = f"{route.res.plural}.{group}" if group else route.res.plural
    where = f'in the namespace "{route.namespace}"' if route.namespace else "at the cluster scope"
    who = request.user or "system:anonymous"
    return (
        f'{full} is forbidden: User "{who}" cannot {verb} resource "{route.res.plural}" '
        f'in API group "{group}" {where}'
    )
