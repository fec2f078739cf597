"""Device map (/ui/) page benchmark: page load and live-update times in Chromium, by cluster size.

Run from the repository root::

    python -m bench.ui_page                                   # 500 and 5000 nodes x 10 devices, 5 runs
    python -m bench.ui_page --sizes 5000 --runs 10 --json out.json
    python -m bench.ui_page --sizes 500 --screenshot docs/images/ui-500-nodes.png
    python -m bench.ui_page --demo --screenshot docs/images/ui-demo.png

For every size it generates a cluster with ``bench.cluster_gen`` (``--devices`` GPUs and 2 NICs per
node; direct-claim pods of one or two GPUs or a GPU and a NIC, in 3 namespaces), serves it with
``python -m extender serve --cluster FILE`` (a subprocess, waited for via /readyz), and binds
``--prefill`` of the pods over HTTP (filter over a sample of 50 nodes, bind to one that fits), so
that the map is not all free; an ``--unschedulable`` fraction of the pods fits nowhere and stays
pending, ``--pending`` more are left unscheduled. Then, in Debian's Chromium (``/usr/bin/chromium``)
driven by Playwright:

1. **load**: a fresh browser context opens ``/ui/`` (the default page of 50 nodes), first once right
   after the server's start (*first load*: the extender builds its read model of the map then), then
   ``--runs`` times; the time is from navigation start to the page's first full render (the
   ``devicemap:first-render`` performance mark: summary, first page of nodes and pending pods fetched
   and drawn; the pools follow). Also the slowest API call of the load (Resource Timing, pools
   included), and the size of the node page.
2. **update**: ``--runs`` times, on the open page, one more pod is bound over HTTP to a node of the
   first page; *event → drawn* is the time from the server-sent revision event reaching the page to
   the claim's device drawn allocated (the page re-fetches summary, node page and pending pods and
   redraws); *bind → drawn* is from just before the bind request to the same moment (includes the
   bind itself and the event stream's 250 ms coalescing).

Prints a Markdown table (median / p90 / max in milliseconds). ``--screenshot PATH`` writes a PNG of the
page after the runs (``{nodes}`` in PATH is replaced by the size); ``--demo`` serves the demo cluster
instead, binds a few of its pods (README order) and only writes the screenshot. Timings are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import cluster_gen
from bench.common import free_port, percentile, positive_ints

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHAPES = {"one-gpu": 3.0, "two-gpus": 1.0, "gpu-and-nic": 1.0}
VIEWPORT = {"width": 1440, "height": 900}

# Watches the node list for the cell of a claim (its aria-label names the claim) and records when it
# is drawn, the render that drew it and the revision event that caused it.
_WATCH = """claim => new Promise(resolve => {
  const find = () => document.querySelector(`#nodes .cell[aria-label*="${claim}"]`);
  const done = () => {
    const seen = performance.now();
    const updates = window.deviceMap.updates.filter(u => u.receivedAt <= seen);
    const event = updates.length ? updates[updates.length - 1] : null;
    resolve({seen, state: find().dataset.state, eventAt: event ? event.receivedAt : null,
             render: window.deviceMap.lastRender});
  };
  if (find()) { done(); return; }
  const observer = new MutationObserver(() => { if (find()) { observer.disconnect(); done(); } });
  observer.observe(document.getElementById('nodes'), {subtree: true, childList: true, attributes: true});
})"""

_LOAD = """() => {
  const mark = performance.getEntriesByName('devicemap:first-render')[0];
  const api = performance.getEntriesByType('resource')
    .filter(e => e.name.includes('/ui/api/') && !e.name.includes('/events'));
  const slowest = api.reduce((a, e) => (e.duration > (a ? a.duration : -1) ? e : a), null);
  const nodes = api.find(e => e.name.includes('/ui/api/nodes?'));
  const nav = performance.getEntriesByType('navigation')[0];
  const script = performance.getEntriesByType('resource').find(e => e.name.includes('/static/app.js'));
  return {firstRender: mark ? mark.startTime : null,
          documentMs: nav ? nav.responseEnd : null,
          scriptMs: script ? script.responseEnd : null,
          domReadyMs: nav ? nav.domContentLoadedEventEnd : null,
          slowestApi: slowest ? slowest.duration : null,
          slowestName: slowest ? new URL(slowest.name).pathname.split('/').pop() : '',
          nodePageBytes: nodes ? (nodes.decodedBodySize || nodes.transferSize) : null,
          cells: document.querySelectorAll('#nodes .cell[data-device-id]').length};
}"""


@dataclass
class Row:
    nodes: int
    devices: int  # GPUs per node
    total_devices: int = 0  # every device of the cluster (GPUs, partitions, NICs)
    cells: int = 0
    node_page_kib: float = 0.0
    cold_load_ms: float = 0.0
    cold_slowest_api: str = ""
    load_ms: list[float] = field(default_factory=list)
    slowest_api_ms: list[float] = field(default_factory=list)
    slowest_api: str = ""
    event_ms: list[float] = field(default_factory=list)
    bind_ms: list[float] = field(default_factory=list)
    serve_ready_s: float = 0.0


# --- the server ------------------------------------------------------------------------------------


class Extender:
    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=120) as answer:
            return json.loads(answer.read())

    def post(self, path: str, body: dict[str, Any]) -> Any:
        data = json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            return json.loads(answer.read())

    def schedule(self, pod: dict[str, Any], nodes: Sequence[str], rng: random.Random) -> str | None:
        """Filter ``pod`` over ``nodes`` and bind it to one that fits; the node, or None."""
        meta = pod["metadata"]
        answer = self.post("filter", {"Pod": pod, "NodeNames": list(nodes)})
        fitting = answer.get("NodeNames") or []
        if not fitting:
            return None
        node = rng.choice(fitting)
        bind = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
        return node if self.post("bind", bind).get("Error") == "" else None


@contextlib.contextmanager
def serve(args: Sequence[str], timeout: float = 900.0) -> Iterator[tuple[Extender, float]]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "extender",
        "serve",
        *args,
        "--listen",
        f"127.0.0.1:{port}",
        "--log-level",
        "warning",
    ]
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                err = process.stderr.read().decode(errors="replace") if process.stderr else ""
                raise SystemExit(f"dra-extender serve exited with {process.returncode}: {err[-2000:]}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(url + "readyz", timeout=2) as ok,
            ):
                if ok.status == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"dra-extender serve not ready within {timeout:.0f} s")
            time.sleep(0.1)
        yield Extender(url), time.perf_counter() - start
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- the browser -----------------------------------------------------------------------------------


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise SystemExit(f"bench.ui_page needs playwright (pip install -e '.[dev]'): {exc}") from exc
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"bench.ui_page needs Chromium at {CHROMIUM} (Debian's chromium package)")
    with sync_playwright() as manager:
        browser = manager.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def open_page(browser: Any, url: str) -> tuple[Any, Any]:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(120_000)
    errors: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    page.wait_for_function("window.deviceMap && window.deviceMap.renders > 0 && !window.deviceMap.busy")
    if errors:
        print(f"warning: the page logged errors: {errors[:3]}", file=sys.stderr)
    return context, page


def wait_live(page: Any) -> None:
    page.wait_for_selector("#live[data-mode='live']", timeout=10_000)


def screenshot(page: Any, path: str, nodes: int | None) -> None:
    target = Path(path.replace("{nodes}", str(nodes)) if nodes is not None else path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # the pending list's first pods are explained in the background: show them explained
    first_reasons = "#pending li[data-pod]:nth-child(-n+3) [data-reason] .muted"
    with contextlib.suppress(Exception):  # not explained within the time: the picture as it is
        page.wait_for_function(f"!document.querySelector({first_reasons!r})", timeout=30_000)
    page.mouse.move(0, 0)
    time.sleep(0.3)
    page.screenshot(path=str(target))
    print(f"wrote {target}", file=sys.stderr)


# --- one size --------------------------------------------------------------------------------------


def measure(size: int, args: argparse.Namespace, browser: Any) -> Row:
    rng = random.Random(args.seed)
    spec = cluster_gen.ClusterSpec(
        nodes=size,
        devices=args.devices,
        partitionable=args.partitionable,
        # the unschedulable pods among them stay pending; a margin for pods the first page cannot take
        pods=int((args.prefill + 2 * args.runs + args.pending) / (1 - min(args.unschedulable, 0.5))) + 10,
        namespaces=3,
        unschedulable=args.unschedulable,
        mix={"direct": 1.0},
        shapes=SHAPES,
        seed=args.seed,
    )
    objects = cluster_gen.generate(spec)
    pods = [o for o in objects if o["kind"] == "Pod"]
    node_names = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Node")
    first_page = node_names[:50]
    row = Row(nodes=size, devices=args.devices)
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        path = Path(tmp) / "cluster.json"
        cluster_gen.write(objects, path)
        with serve(["--cluster", str(path)]) as (extender, ready):
            row.serve_ready_s = ready
            print(f"{size} nodes: serving after {ready:.1f} s; binding {args.prefill} pods", file=sys.stderr)
            queue = list(pods)
            bound = 0
            tried = 0
            while queue and bound < args.prefill and tried < 3 * args.prefill:
                pod = queue.pop(0)
                tried += 1
                sample = rng.sample(node_names, min(50, len(node_names)))
                if extender.schedule(pod, sample, rng):
                    bound += 1
            row.total_devices = int(extender.get("ui/api/summary")["totals"]["devices"])
            ui = extender.url + "ui/"
            # the first load after the start pays the read model's cold build; then --runs warm loads
            for run in range(args.runs + 1):
                context, page = open_page(browser, ui)
                load = page.evaluate(_LOAD)
                if args.verbose:
                    print(f"  load {run}: {json.dumps(load)}", file=sys.stderr)
                if run == 0:
                    row.cold_load_ms = load["firstRender"]
                    row.cold_slowest_api = f"{load['slowestApi'] or 0.0:.0f} ({load['slowestName']})"
                else:
                    row.load_ms.append(load["firstRender"])
                    row.slowest_api_ms.append(load["slowestApi"] or 0.0)
                    row.slowest_api = load["slowestName"]
                row.cells = load["cells"]
                row.node_page_kib = (load["nodePageBytes"] or 0) / 1024
                if run < args.runs:
                    context.close()
            # the last page stays open for the updates
            wait_live(page)
            updates = 0
            while queue and updates < args.runs:
                pod = queue.pop(0)
                claim = f"{pod['metadata']['namespace']}/{pod['spec']['resourceClaims'][0]['resourceClaimName']}"
                # the watcher's promise is kept in the page (evaluating it here would wait for it)
                page.evaluate(f"claim => {{ window.__watch = ({_WATCH})(claim); }}", "claim " + claim)
                before = page.evaluate("performance.now()")
                if not extender.schedule(pod, first_page, rng):
                    continue
                seen = page.evaluate("window.__watch")
                if seen["eventAt"] is not None:
                    row.event_ms.append(seen["seen"] - seen["eventAt"])
                row.bind_ms.append(seen["seen"] - before)
                updates += 1
                time.sleep(0.3)  # let the event stream's coalescing window pass
            if args.screenshot:
                screenshot(page, args.screenshot, size)
            context.close()
    return row


def demo_screenshot(args: argparse.Namespace, browser: Any) -> None:
    rng = random.Random(args.seed)
    nodes = ["node-1", "node-2", "node-3", "node-4"]
    with serve(["--demo"]) as (extender, _ready):
        pods = {
            "two-gpu-pod": ("7f000000-0000-4000-8000-000000000002", "gpus", "two-gpus", "node-2"),
            "inference-a": ("7f000000-0000-4000-8000-000000000007", "gpu", "shared-gpu", "node-3"),
            "small-slice-pod": ("7f000000-0000-4000-8000-000000000006", "slice", "small-slice", "node-4"),
        }
        for name, (uid, ref, claim, node) in pods.items():
            pod = {
                "metadata": {"name": name, "namespace": "default", "uid": uid},
                "spec": {"resourceClaims": [{"name": ref, "resourceClaimName": claim}]},
            }
            extender.schedule(pod, [node] if node else nodes, rng)
        context, page = open_page(browser, extender.url + "ui/")
        wait_live(page)
        # the tooltip of the partition small-slice-pod got, under its GPU's box
        cells = page.locator("#nodes .node[data-node='node-4'] .part-group .cell[data-state='allocated']")
        if cells.count():
            cells.first.hover()
            time.sleep(0.3)
        target = Path(args.screenshot)
        target.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(target))
        print(f"wrote {target}", file=sys.stderr)
        context.close()


# --- output ----------------------------------------------------------------------------------------


def _stats(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.0f} / {percentile(values, 90):.0f} / {max(values):.0f}"


def table(rows: Sequence[Row], runs: int) -> str:
    lines = [
        f"Chromium ({CHROMIUM}), page of 50 nodes; the first load after the server's start, then {runs} loads "
        f"and {runs} live updates: median / p90 / max in ms "
        f"({platform.python_implementation()} {platform.python_version()}, {platform.machine()})",
        "",
        "| nodes | devices | cells drawn | node page | serve ready | first load (slowest API call) "
        "| load: first full render | slowest API call | update: event → drawn | update: bind → drawn |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.nodes:,} | {r.total_devices:,} | {r.cells:,} | {r.node_page_kib:.0f} KiB | "
            f"{r.serve_ready_s:.1f} s | {r.cold_load_ms:.0f} ({r.cold_slowest_api}) | {_stats(r.load_ms)} | "
            f"{_stats(r.slowest_api_ms)} ({r.slowest_api}) | {_stats(r.event_ms)} | {_stats(r.bind_ms)} |"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.ui_page", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", type=positive_ints, default=[500, 5000], help="node counts (default 500,5000)")
    parser.add_argument("--devices", type=int, default=10, help="GPUs per node (default 10; plus 2 NICs)")
    parser.add_argument("--partitionable", type=float, default=0.0, help="fraction of partitionable nodes (default 0)")
    parser.add_argument("--runs", type=int, default=5, help="page loads and live updates per size (default 5)")
    parser.add_argument("--prefill", type=int, default=300, help="pods bound before measuring (default 300)")
    parser.add_argument("--pending", type=int, default=30, help="pods left pending (default 30)")
    parser.add_argument(
        "--unschedulable",
        type=float,
        default=0.02,
        help="fraction of pods no node fits (default 0.02): they stay pending",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--screenshot", help="write a PNG of the page here ({nodes} is replaced by the size)")
    parser.add_argument("--demo", action="store_true", help="only a screenshot of the demo cluster (--screenshot)")
    parser.add_argument("--json", help="write the measurements here")
    parser.add_argument("--verbose", action="store_true", help="print each load's timings")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.demo and not args.screenshot:
        raise SystemExit("--demo writes a screenshot: give --screenshot PATH")
    with chromium() as browser:
        if args.demo:
            demo_screenshot(args, browser)
            return 0
        rows = [measure(size, args, browser) for size in args.sizes]
    print(table(rows, args.runs))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
