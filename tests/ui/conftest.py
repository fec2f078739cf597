"""Fixtures of the device map's browser tests: a real ``dra-extender serve`` process and Debian's Chromium
driven by Playwright.

The browser is ``/usr/bin/chromium`` (installed by ``.ci/run``), never Playwright's own download. When
it is missing, Playwright is not importable or the browser does not start, every test of the module is
skipped with the reason (pytest runs with ``-rs``, so the reason is printed): never a silent pass.

One server and one browser per module; each test gets a fresh browser context and page, whose console
errors (and uncaught exceptions) fail the test.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bench.common import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("DRA_EXTENDER_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: The pager's text ("nodes 1, en dash, 50 of 5000") uses an en dash.
DASH = "\u2013"
#: How long a page may take to show what a test waits for (the demo renders in well under a second).
TIMEOUT_MS = 30_000


@dataclass
class Server:
    """A ``dra-extender serve`` process on a loopback port."""

    url: str  # with the trailing slash, e.g. http://127.0.0.1:PORT/
    process: subprocess.Popen[bytes]

    @property
    def ui(self) -> str:
        return f"{self.url}ui/"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=60) as answer:
            return json.loads(answer.read())

    def post(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.loads(answer.read())


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = process.stdout.read().decode(errors="replace") if process.stdout else ""
            raise RuntimeError(f"dra-extender serve exited with {process.returncode}:\n{output[-4000:]}")
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(url + "readyz", timeout=1) as ready,
        ):
            if ready.status == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"dra-extender serve at {url} was not ready within {timeout:.0f} s")


@contextlib.contextmanager
def serve(args: Sequence[str], prefix: str = "/", timeout: float = 60.0) -> Iterator[Server]:
    """``python -m extender serve ARGS --path-prefix PREFIX --listen 127.0.0.1:PORT`` until the block ends;
    the server's ``url`` includes the prefix."""
    port = free_port()
    command = [sys.executable, "-m", "extender", "serve", *args, "--path-prefix", prefix]
    command += ["--listen", f"127.0.0.1:{port}", "--log-level", "warning"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}{prefix}"
    try:
        _wait_ready(url, process, timeout)
        yield Server(url, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()


@pytest.fixture(scope="module")
def demo() -> Iterator[Server]:
    """The demo cluster (deploy/examples/demo-cluster.yaml), one process per test module."""
    with serve(["--demo"]) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"browser tests need Chromium at {CHROMIUM} (Debian's chromium package; .ci/run installs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.skip(f"browser tests need playwright (pip install -e '.[dev]'): {exc}")
    try:
        manager = sync_playwright().start()
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"Playwright did not start: {exc}")
    try:
        try:
            chromium = manager.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        except Exception as exc:  # pragma: no cover - depends on the machine
            pytest.skip(f"Chromium at {CHROMIUM} did not launch: {str(exc).splitlines()[0]}")
        yield chromium
        chromium.close()
    finally:
        manager.stop()


@dataclass
class Console:
    """What a page printed: console messages of type error and uncaught exceptions."""

    errors: list[str] = field(default_factory=list)
    #: Substrings of errors a test expects (e.g. the refused event stream of the polling test).
    allowed: list[str] = field(default_factory=list)

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(a in e for a in self.allowed)]


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def page(browser: Any, console: Console) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)

    def on_console(message: Any) -> None:
        if message.type == "error":
            console.errors.append(message.text)

    def on_error(error: Any) -> None:
        console.errors.append(f"uncaught: {error}")

    page.on("console", on_console)
    page.on("pageerror", on_error)
    yield page
    context.close()
    assert not console.unexpected(), f"the page logged errors: {console.unexpected()}"


def open_map(page: Any, url: str) -> None:
    """Load the page and wait for its first full render."""
    page.goto(url)
    wait_rendered(page, 0)


def renders(page: Any) -> int:
    return int(page.evaluate("window.deviceMap ? window.deviceMap.renders : 0"))


def wait_rendered(page: Any, after: int) -> None:
    """Wait until the page rendered more than ``after`` times and no re-fetch is running."""
    page.wait_for_function("n => window.deviceMap && window.deviceMap.renders > n && !window.deviceMap.busy", arg=after)


def change_and_wait(page: Any, action: Callable[[], Any]) -> None:
    """Run ``action`` (a filter change, a page change) and wait for the render it causes."""
    before = renders(page)
    action()
    wait_rendered(page, before)
