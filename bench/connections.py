"""What a new connection costs the extender, with and without TLS, against a request on a kept one.

kube-scheduler's HTTP client for an extender keeps at most two idle connections to it (its
transport is Go's ``http.Transport`` with ``MaxIdleConnsPerHost`` unset: Go's default of 2;
``pkg/scheduler/extender.go``, ``makeTransport``). Every request beyond two at once opens a new
connection, closed again when it is answered; binds that wait seconds for the resourceclaim
controller's claims make that most of them on a busy cluster (docs/performance.md, "Pass 10").
With HTTPS each new connection is a full TLS handshake: the transport keeps no TLS sessions to
resume (client-go's TLS configuration sets no ``ClientSessionCache``).

Run from the repository root::

    python -m bench.connections                    # 2000 requests per row
    python -m bench.connections --requests 200 --keys ec

For each mode (plain HTTP, HTTPS, HTTPS with client certificates, i.e. ``deploy/tls``) and server
key type (ECDSA P-256, RSA 2048; certificates made with ``cryptography`` into a temporary folder),
it starts ``dra-extender serve --demo`` with the matching ``--tls-*`` flags (its own event loop
choice: uvloop where installed) and sends ``GET /healthz`` ``--requests`` times over one kept
connection, then ``--requests`` times each on a new connection (TCP connect, TLS handshake, one
request, close), from this process with the blocking standard library client. The server's CPU
(``/proc/PID/stat``) over each series, divided by the requests, is printed as a table: per request
kept, per request on a new connection, and the difference, what a new connection itself costs.
Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import cpu_seconds, free_port
from extender.tlsverify import as_kubernetes_verifies
from tests.controlplane.pki import KEY_TYPES, Authority

__all__ = ["MODES", "Row", "client_context", "main", "make_certificates", "measure", "server_args", "table"]

#: plain HTTP, HTTPS, HTTPS with client certificates (mutual TLS, what ``deploy/tls`` configures)
MODES = ("http", "https", "mtls")
KEYS = KEY_TYPES


@dataclass(frozen=True)
class Row:
    mode: str
    key: str  # "" for plain HTTP
    requests: int
    kept_ms: float  # server CPU per request on one kept connection
    new_ms: float  # server CPU per request, each on a new connection

    @property
    def connection_ms(self) -> float:
        return self.new_ms - self.kept_ms


# --- certificates ---------------------------------------------------------------------------------


def make_certificates(folder: Path, kind: str) -> dict[str, Path]:
    """A CA, a server certificate for IP 127.0.0.1 and a client certificate, all of key type
    ``kind`` (``tests/controlplane/pki.py``'s ``Authority``); returns the PEM files by role (``ca``,
    ``server_cert``, ``server_key``, ``client_cert``, ``client_key``)."""
    ca = Authority(folder, "ca", "bench-ca", key_type=kind)
    server = ca.issue("server", "bench-server", server=True, hosts=("127.0.0.1",))
    client = ca.issue("client", "bench-client")
    return {
        "ca": ca.pair.cert,
        "server_cert": server.cert,
        "server_key": server.key,
        "client_cert": client.cert,
        "client_key": client.key,
    }


# --- one row --------------------------------------------------------------------------------------


def server_args(mode: str, files: dict[str, Path]) -> list[str]:
    """The extender's ``--tls-*`` flags for ``mode`` (``mtls``: as ``deploy/tls`` gives them)."""
    if mode == "http":
        return []
    args = ["--tls-cert-file", str(files["server_cert"]), "--tls-key-file", str(files["server_key"])]
    if mode == "mtls":
        args += ["--tls-client-ca-file", str(files["ca"])]
    return args


def client_context(mode: str, files: dict[str, Path]) -> ssl.SSLContext | None:
    """kube-scheduler's side of ``mode``: its CA and, for ``mtls``, its client certificate."""
    if mode == "http":
        return None
    # kube-scheduler's side: Go's verification, whatever Python runs this
    context = as_kubernetes_verifies(ssl.create_default_context(cafile=str(files["ca"])))
    if mode == "mtls":
        context.load_cert_chain(str(files["client_cert"]), str(files["client_key"]))
    return context


def _wait_ready(port: int, context: ssl.SSLContext | None, process: subprocess.Popen[bytes]) -> None:
    scheme = "https" if context else "http"
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the extender exited with {process.returncode} before it answered")
        try:
            with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/readyz", context=context, timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _connection(port: int, context: ssl.SSLContext | None) -> http.client.HTTPConnection:
    if context is None:
        return http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    return http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=context)


def _get(connection: http.client.HTTPConnection) -> None:
    connection.request("GET", "/healthz")
    answer = connection.getresponse()
    answer.read()
    if answer.status != 200:
        raise RuntimeError(f"GET /healthz answered {answer.status}")


def _server_cpu_per_request(pid: int, requests: int, send: Callable[[], None]) -> float:
    before = cpu_seconds(pid)
    send()
    return 1000 * (cpu_seconds(pid) - before) / requests


def measure(mode: str, key: str, requests: int, folder: Path) -> Row:
    """One row: the server's CPU per request over a kept connection and over new ones."""
    files = make_certificates(folder, key) if mode != "http" else {}
    context = client_context(mode, files)
    port = free_port()
    command = [sys.executable, "-m", "extender", "serve", "--demo", "--listen", f"127.0.0.1:{port}"]
    command += ["--log-level", "warning", *server_args(mode, files)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_ready(port, context, process)

        def kept() -> None:
            connection = _connection(port, context)
            try:
                for _ in range(requests):
                    _get(connection)
            finally:
                connection.close()

        def new() -> None:
            for _ in range(requests):
                connection = _connection(port, context)
                try:
                    _get(connection)
                finally:
                    connection.close()

        kept()  # warm: the first requests pay for imports and caches
        kept_ms = _server_cpu_per_request(process.pid, requests, kept)
        new_ms = _server_cpu_per_request(process.pid, requests, new)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return Row(mode, key if mode != "http" else "", requests, round(kept_ms, 3), round(new_ms, 3))


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| mode | server key | requests | server CPU ms per request, kept connection "
        "| per request, new connection each | a new connection itself |",
        "|---|---|---:|---:|---:|---:|",
    ]
    labels = {"http": "plain HTTP", "https": "HTTPS", "mtls": "HTTPS, client certificates (`deploy/tls`)"}
    keys = {"ec": "ECDSA P-256", "rsa": "RSA 2048", "": "—"}
    for row in rows:
        lines.append(
            f"| {labels[row.mode]} | {keys[row.key]} | {row.requests} | {row.kept_ms:.3f} | {row.new_ms:.3f} "
            f"| {row.connection_ms:.3f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.connections", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per series (default 2000)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--keys", default=",".join(KEYS), help=f"server key types, of {', '.join(KEYS)}")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    keys = [k for k in args.keys.split(",") if k]
    if args.requests < 1 or not set(modes) <= set(MODES) or not set(keys) <= set(KEYS) or not modes or not keys:
        parser.error(f"--requests must be positive, --modes of {', '.join(MODES)}, --keys of {', '.join(KEYS)}")
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {ssl.OPENSSL_VERSION}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="dra-bench-tls-") as tmp:
        for mode in modes:
            for key in keys if mode != "http" else [""]:
                folder = Path(tmp) / f"{mode}-{key}"
                folder.mkdir()
                rows.append(measure(mode, key, args.requests, folder))
                print(f"  {rows[-1]}", flush=True)
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
