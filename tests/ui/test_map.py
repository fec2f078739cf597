"""The device map (/ui/) in Chromium against ``dra-extender serve --demo``: every node and device of the
API drawn with its state, partitions grouped under their parent, filters, the tooltip, the detail
panel, the pending pods with their reason and the why panel. Read-only: the cluster is not changed
(tests/ui/test_live.py binds)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.ui.conftest import DASH, TIMEOUT_MS, Server, change_and_wait, open_map, wait_rendered

#: Without Playwright the module is skipped with this reason (pytest -rs prints it), never passed.
_playwright = pytest.importorskip(
    "playwright.sync_api", reason="browser tests need playwright: pip install -e '.[dev]'"
)
#: Playwright's ``expect`` gives up after 5 s whatever the page's default timeout, which a loaded
#: machine can take; this module's own instance waits up to ``TIMEOUT_MS``, a bound against a hang
#: only (the global ``expect`` is left as it is).
expect = type(_playwright.expect)()
expect.set_options(timeout=TIMEOUT_MS)


def api_devices(demo: Server, query: str = "") -> dict[str, dict[str, Any]]:
    page = demo.get(f"ui/api/nodes?limit=500{query}")
    return {device["id"]: {**device, "node": node["name"]} for node in page["nodes"] for device in node["devices"]}


def page_devices(page: Any) -> dict[str, str]:
    """Device id -> data-state of every cell of the node list."""
    states: dict[str, str] = page.eval_on_selector_all(
        "#nodes .cell[data-device-id]",
        "cells => Object.fromEntries(cells.map(c => [c.dataset.deviceId, c.dataset.state]))",
    )
    return states


def test_the_map_draws_every_node_and_device_with_its_state(page: Any, demo: Server) -> None:
    open_map(page, demo.ui)
    expected = api_devices(demo)
    assert expected, "the demo has devices"
    assert page_devices(page) == {device_id: device["state"] for device_id, device in expected.items()}
    nodes = demo.get("ui/api/nodes?limit=500")["nodes"]
    assert page.eval_on_selector_all("#nodes .node", "rows => rows.map(r => r.dataset.node)") == [
        n["name"] for n in nodes
    ]
    assert page.get_attribute("#nodes .cell[data-state='allocated']", "aria-label")
    # the header: counters and totals as the summary has them, a legend entry per state
    summary = demo.get("ui/api/summary")
    expect(page.locator("#count-nodes")).to_have_attribute("data-value", str(summary["totals"]["nodes"]))
    expect(page.locator("#count-devices")).to_have_attribute("data-value", str(summary["totals"]["devices"]))
    expect(page.locator("#count-binds")).to_have_attribute("data-value", str(summary["counters"]["binds"]))
    for state in ("free", "allocated", "binding", "held", "tainted", "shared", "admin"):
        expect(page.locator(f"#legend [data-total='{state}']")).to_have_text(str(summary["totals"][state]))
    expect(page.locator("#page-info")).to_have_text(f"nodes 1{DASH}{len(nodes)} of {len(nodes)}")
    expect(page.locator("#live")).to_have_attribute("data-mode", "live")


def test_partitions_are_grouped_under_their_device(page: Any, demo: Server) -> None:
    open_map(page, demo.ui)
    grouped = {d["id"]: d["group"] for d in api_devices(demo).values() if d["group"]}
    assert grouped, "the demo's node-4 has partitionable GPUs"
    drawn = page.eval_on_selector_all(
        "#nodes .part-group .cell",
        "cells => cells.map(c => [c.dataset.deviceId, c.closest('.part-group').dataset.group])",
    )
    assert dict(drawn) == grouped
    # each group is labelled by its whole device, e.g. gpu-0 for gpu-0-counters
    labels = page.eval_on_selector_all(
        ".part-group[data-group='gpu-0-counters'] .group-label", "ls => ls.map(l => l.textContent)"
    )
    assert labels == ["gpu-0"]


def test_driver_filter_keeps_only_that_drivers_devices(page: Any, demo: Server) -> None:
    open_map(page, demo.ui)
    change_and_wait(page, lambda: page.select_option("#filter-driver", "nic.example.com"))
    expected = api_devices(demo, "&driver=nic.example.com")
    assert expected and all(d["driver"] == "nic.example.com" for d in expected.values())
    assert page_devices(page) == {i: d["state"] for i, d in expected.items()}
    assert "driver=nic.example.com" in page.url
    # the filter survives a reload (it is in the URL), and "clear filters" brings everything back
    page.reload()
    wait_rendered(page, 0)
    assert set(page_devices(page)) == set(expected)
    change_and_wait(page, lambda: page.click("#filter-clear"))
    assert set(page_devices(page)) == set(api_devices(demo))


def test_label_namespace_and_name_filters(page: Any, demo: Server) -> None:
    open_map(page, demo.ui)
    change_and_wait(page, lambda: page.select_option("#filter-label", "topology.kubernetes.io/zone=zone-1"))
    zone_1 = [n["name"] for n in demo.get("ui/api/nodes?label=topology.kubernetes.io/zone=zone-1")["nodes"]]
    assert zone_1 == ["node-1", "node-3"]
    expect(page.locator("#nodes .node")).to_have_count(2)
    assert page.eval_on_selector_all("#nodes .node", "rows => rows.map(r => r.dataset.node)") == zone_1

    change_and_wait(page, lambda: page.select_option("#filter-label", ""))
    change_and_wait(page, lambda: page.select_option("#filter-namespace", "default"))
    held = api_devices(demo, "&namespace=default")
    assert held, "claims of namespace default hold devices in the demo"
    assert page_devices(page) == {i: d["state"] for i, d in held.items()}

    change_and_wait(page, lambda: page.select_option("#filter-namespace", ""))
    change_and_wait(page, lambda: page.fill("#filter-q", "node-3"))
    expect(page.locator("#nodes .node")).to_have_count(1)
    expect(page.locator("#nodes .node")).to_have_attribute("data-node", "node-3")


def test_hover_shows_the_device_its_claims_and_pods(page: Any, demo: Server) -> None:
    open_map(page, demo.ui)
    device = next(d for d in api_devices(demo).values() if d["state"] == "allocated" and d["pods"])
    page.hover(f"[data-device-id='{device['id']}']")
    tooltip = page.locator("#tooltip")
    expect(tooltip).to_be_visible()
    expect(tooltip).to_contain_text(device["name"])
    expect(tooltip).to_contain_text(device["claims"][0])
    expect(tooltip).to_contain_text(device["pods"][0])
    page.mouse.move(0, 0)
    expect(tooltip).to_be_hidden()


def test_click_opens_the_detail_panel(page: Any, demo: Server) -> None:
    open_map(page, demo.ui)
    device = next(d for d in api_devices(demo).values() if d["state"] == "allocated")
    detail = demo.get(f"ui/api/nodes/{device['node']}")
    full = next(d for d in detail["devices"] if d["id"] == device["id"])
    page.click(f"[data-device-id='{device['id']}']")
    panel = page.locator("#detail")
    expect(panel).to_be_visible()
    expect(panel).to_have_attribute("data-device", device["id"])
    expect(page.locator("#detail-title")).to_have_text(device["node"])
    section = page.locator(f"[data-detail-device='{device['id']}']")
    for name in full["attributes"]:
        expect(section).to_contain_text(name)
    for name in full["capacity"]:
        expect(section).to_contain_text(name)
    expect(section.locator("[data-table='claims']")).to_contain_text(device["claims"][0])
    expect(section.locator("[data-table='claims']")).to_contain_text(device["pods"][0])
    expect(page.locator("#detail [data-table='devices'] tr[data-select-device]")).to_have_count(len(detail["devices"]))
    # another device of the node from the panel's list, then Escape closes
    other = next(d for d in detail["devices"] if d["id"] != device["id"])
    page.click(f"#detail tr[data-select-device='{other['id']}']")
    expect(panel).to_have_attribute("data-device", other["id"])
    expect(page.locator("#nodes .cell.selected")).to_have_attribute("data-device-id", other["id"])
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()


def test_pending_pods_show_their_reason_and_the_why_panel(page: Any, demo: Server) -> None:
    open_map(page, demo.ui)
    pending = demo.get("ui/api/pending")["pods"]
    assert pending, "the demo has pending pods"
    expect(page.locator("#pending li[data-pod]")).to_have_count(len(pending))
    explained = next(p for p in pending if p["explained"] and p["summary"])
    item = page.locator(f"#pending li[data-pod='{explained['pod']}']")
    expect(item.locator("[data-reason]")).to_have_text(explained["summary"])
    for closest in explained["closest"][:3]:
        expect(item).to_contain_text(closest["node"])
    namespace, name = explained["pod"].split("/")
    why = demo.get(f"debug/why/{namespace}/{name}")
    item.locator("[data-why]").click()
    panel = page.locator("#detail")
    expect(panel).to_have_attribute("data-kind", "pod")
    expect(panel.locator("[data-why-summary]")).to_have_text(why["summary"])
    for group in why.get("reasons", []):
        expect(panel.locator(".reasons")).to_contain_text(group["reason"])
    # a closest node opens that node's details
    if why.get("closest"):
        panel.locator(".why-closest [data-node-open]").first.click()
        expect(panel).to_have_attribute("data-kind", "node")
        expect(page.locator("#detail-title")).to_have_text(why["closest"][0]["node"])


def test_pools_are_listed_with_generation_and_status(page: Any, demo: Server) -> None:
    open_map(page, demo.ui)
    pools = demo.get("ui/api/pools")["pools"]
    assert pools
    expect(page.locator("#pools-count")).to_have_text(str(len(pools)))
    if len(pools) <= 20:
        expect(page.locator("#pools tr[data-pool]")).to_have_count(len(pools))
        first = pools[0]
        row = page.locator(f"#pools tr[data-pool='{first['driver']}/{first['pool']}']").first
        expect(row).to_contain_text(str(first["generation"]))
        expect(row.locator(".status")).to_have_text(first["status"])


def test_a_pod_that_fits_nowhere_shows_what_its_closest_nodes_lack(page: Any, demo: Server) -> None:
    """The demo's big-training (nine large GPUs; no node has more than eight): the pending list
    says no node is available and, per closest node, what is short there (the why's detail)."""
    open_map(page, demo.ui)
    item = page.locator("#pending li[data-pod='default/big-training']")
    expect(item.locator("[data-reason]")).to_contain_text("0/4 nodes are available")
    expect(item).to_contain_text("needs 9, only 8 devices match the selectors")
