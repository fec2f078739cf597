"""The device map follows the cluster live: a bind made over HTTP (filter, then bind, as the README shows)
turns the claim's devices to allocated on an open page without a reload, over the event stream, and
also when the page has to fall back to polling because the event stream is refused."""

from __future__ import annotations

from typing import Any

import pytest

from tests.ui.conftest import TIMEOUT_MS, Console, Server, open_map

#: Without Playwright the module is skipped with this reason (pytest -rs prints it), never passed.
_playwright = pytest.importorskip(
    "playwright.sync_api", reason="browser tests need playwright: pip install -e '.[dev]'"
)
#: Playwright's ``expect`` gives up after 5 s whatever the page's default timeout, which a loaded
#: machine can take; this module's own instance waits up to ``TIMEOUT_MS``, a bound against a hang
#: only (the global ``expect`` is left as it is).
expect = type(_playwright.expect)()
expect.set_options(timeout=TIMEOUT_MS)

ALL_NODES = ["node-1", "node-2", "node-3", "node-4"]


def schedule(demo: Server, name: str, uid: str, claim: tuple[str, str], node: str) -> None:
    """What kube-scheduler does for a pending pod: filter over all nodes, then bind to ``node``."""
    pod = {
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"resourceClaims": [{"name": claim[0], "resourceClaimName": claim[1]}]},
    }
    answer = demo.post("filter", {"Pod": pod, "NodeNames": ALL_NODES})
    assert node in answer["NodeNames"], answer
    assert demo.post("bind", {"PodName": name, "PodNamespace": "default", "PodUID": uid, "Node": node}) == {"Error": ""}


def devices_of_claim(demo: Server, claim: str) -> dict[str, str]:
    nodes = demo.get("ui/api/nodes?limit=500")["nodes"]
    return {d["id"]: d["state"] for n in nodes for d in n["devices"] if claim in d["claims"]}


def mark_no_reload(page: Any) -> None:
    page.evaluate("window.__sameDocument = true")


def assert_not_reloaded(page: Any) -> None:
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"


def test_a_bind_appears_on_the_map_without_a_reload(page: Any, demo: Server) -> None:
    open_map(page, demo.ui)
    expect(page.locator("#live")).to_have_attribute("data-mode", "live")
    mark_no_reload(page)
    assert devices_of_claim(demo, "default/two-gpus") == {}
    binds = int(page.get_attribute("#count-binds", "data-value") or 0)
    expect(page.locator("#pending li[data-pod='default/two-gpu-pod']")).to_have_count(1)

    schedule(demo, "two-gpu-pod", "7f000000-0000-4000-8000-000000000002", ("gpus", "two-gpus"), "node-2")

    allocated = devices_of_claim(demo, "default/two-gpus")
    assert len(allocated) == 2 and set(allocated.values()) == {"allocated"}, allocated
    for device_id in allocated:
        cell = page.locator(f"#nodes .cell[data-device-id='{device_id}']")
        expect(cell).to_have_attribute("data-state", "allocated")
        assert "default/two-gpus" in (cell.get_attribute("aria-label") or "")
    expect(page.locator("#count-binds")).to_have_attribute("data-value", str(binds + 1))
    expect(page.locator("#pending li[data-pod='default/two-gpu-pod']")).to_have_count(0)
    assert_not_reloaded(page)


def test_polling_takes_over_when_the_event_stream_fails(page: Any, demo: Server, console: Console) -> None:
    page.route("**/ui/api/events", lambda route: route.fulfill(status=503, body="no streams here"))
    console.allowed.append("503")  # Chromium logs the refused stream as a failed resource load
    open_map(page, demo.ui)
    expect(page.locator("#live")).to_have_attribute("data-mode", "polling")
    mark_no_reload(page)
    before = devices_of_claim(demo, "default/small-slice")
    assert before == {}

    schedule(demo, "small-slice-pod", "7f000000-0000-4000-8000-000000000006", ("slice", "small-slice"), "node-4")

    allocated = devices_of_claim(demo, "default/small-slice")
    assert len(allocated) == 1, allocated
    (device_id,) = allocated
    # the next poll (every 2 s) shows it; expect's TIMEOUT_MS only bounds a hang
    expect(page.locator(f"#nodes .cell[data-device-id='{device_id}']")).to_have_attribute("data-state", "allocated")
    assert_not_reloaded(page)


def test_a_pod_the_filter_finds_no_node_for_is_listed_first_with_a_badge(page: Any, demo: Server) -> None:
    open_map(page, demo.ui)
    pods = {p["pod"]: p for p in demo.get("ui/api/pending")["pods"]}
    big = pods["default/big-training"]  # nine large GPUs: no node of the demo has more than eight
    item = page.locator("#pending li[data-pod='default/big-training']")
    expect(item).to_have_attribute("data-rejected", "false")
    expect(item.locator(".rejected-badge")).to_have_count(0)
    pod = {"metadata": {"name": "big-training", "namespace": "default", "uid": big["uid"]}}
    assert demo.post("filter", {"Pod": pod, "NodeNames": ALL_NODES})["NodeNames"] in (None, [])
    expect(page.locator("#pending li.pod").first).to_have_attribute("data-pod", "default/big-training")
    expect(item).to_have_attribute("data-rejected", "true")
    expect(item.locator(".rejected-badge")).to_have_text("no node fits")
