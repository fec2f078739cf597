// The device map of dra-extender: a read-only, live view of the cluster's DRA devices.
//
// Plain ES2020, no framework, no build step, nothing fetched from outside the extender. Everything
// shown comes from the JSON endpoints documented in docs/ui.md, always by URLs relative to the page
// (the extender may serve under a path prefix). A new revision (server-sent events on ui/api/events,
// or polling every 2 s where those fail) re-fetches the summary, the page of nodes shown, the pending
// pods and an open node's details; nothing is reloaded.

"use strict";

// --- constants ------------------------------------------------------------------------------------

/** Device states in legend order: the letter is drawn in the cell too, so colour is never the only cue. */
const STATES = [
  { state: "free", label: "free", letter: "", help: "no claim holds it" },
  { state: "allocated", label: "allocated", letter: "A", help: "allocated to a claim" },
  { state: "shared", label: "shared", letter: "S", help: "allows several allocations or has capacity partly used" },
  { state: "binding", label: "binding", letter: "B", help: "a bind is in flight" },
  { state: "held", label: "held", letter: "H", help: "held tentatively between filter and bind" },
  { state: "nominated", label: "nominated", letter: "N", help: "free, held for a preemptor while its victims go" },
  { state: "admin", label: "admin", letter: "D", help: "held only by admin-access claims" },
  { state: "tainted", label: "tainted", letter: "T", help: "a NoSchedule/NoExecute taint, not allocated" },
];
const STATE_BY_NAME = new Map(STATES.map((s) => [s.state, s]));
const FILTER_KEYS = ["driver", "deviceClass", "label", "namespace", "q"];
const PAGE_SIZES = [25, 50, 100, 200, 500];
const POLL_MS = 2000;
const SSE_RETRY_MS = 15000;
const POOLS_REFRESH_MS = 5000;
const POOLS_SHOWN = 20; // all pools are listed when there are at most this many
const POOLS_MAX_ROWS = 300;
const PENDING_MAX = 100;
const LABEL_VALUES_MAX = 100;

// --- URLs -----------------------------------------------------------------------------------------

/** The URL of the page's directory (…/ui/), whatever the path prefix and even without the trailing slash. */
function uiBase() {
  const url = new URL(window.location.href);
  url.search = "";
  url.hash = "";
  if (url.pathname.endsWith("/index.html")) url.pathname = url.pathname.slice(0, -"index.html".length);
  if (!url.pathname.endsWith("/")) url.pathname += "/";
  return url;
}
const BASE = uiBase();

function apiURL(path, params = {}) {
  const url = new URL(path, BASE);
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, String(value));
  }
  return url.toString();
}

/** debug/… lives beside ui/ under the same prefix. */
function debugURL(path) {
  return new URL(`../${path}`, BASE).toString();
}

async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
  let body = null;
  try {
    body = await response.json();
  } catch (err) {
    if (response.ok) throw new Error(`${url}: not JSON (${err.message})`);
  }
  if (!response.ok) {
    const error = new Error((body && body.error) || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

// --- small helpers --------------------------------------------------------------------------------

const $ = (selector, root = document) => root.querySelector(selector);

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

const numberFormat = new Intl.NumberFormat("en-US");
function num(value) {
  return typeof value === "number" ? numberFormat.format(value) : "–";
}

function plural(n, word, many = `${word}s`) {
  return `${num(n)} ${n === 1 ? word : many}`;
}

function age(seconds) {
  if (typeof seconds !== "number" || !Number.isFinite(seconds)) return "";
  if (seconds < 60) return `${Math.round(seconds)}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h${String(Math.floor((seconds % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(seconds / 86400)}d`;
}

function shortDriver(driver) {
  return String(driver || "").split(".")[0] || driver;
}

/** An attribute or capacity value in any of the shapes the API may give ({string: x}, {value: x}, x). */
function scalar(value) {
  if (value === null || value === undefined) return "";
  if (typeof value !== "object") return String(value);
  const keys = Object.keys(value);
  if (keys.length === 1 && typeof value[keys[0]] !== "object") return String(value[keys[0]]);
  return JSON.stringify(value);
}

function asList(value) {
  if (Array.isArray(value)) return value;
  if (value === null || value === undefined || value === "") return [];
  return [value];
}

function claimName(claim) {
  return typeof claim === "string" ? claim : claim && (claim.claim || claim.name || JSON.stringify(claim));
}

function taintText(taint) {
  if (typeof taint === "string") return taint;
  if (!taint || typeof taint !== "object") return String(taint);
  const kv = taint.value ? `${taint.key}=${taint.value}` : taint.key;
  return taint.effect ? `${kv}:${taint.effect}` : String(kv);
}

function stateInfo(state) {
  return STATE_BY_NAME.get(state) || { state, label: state || "unknown", letter: "?", help: "" };
}

/** "held for preemptor NS/POD (priority P) until TIME" for a device a nomination holds, else "". */
function nominationText(device) {
  const n = device.nomination;
  if (!n) return "";
  const until = n.until ? new Date(n.until) : null;
  const when = until && !Number.isNaN(until.getTime()) ? until.toLocaleString() : n.until || "?";
  return `held for preemptor ${n.pod} (priority ${n.priority}) until ${when}`;
}

function deviceLabel(device) {
  const parts = [`${device.name}: ${stateInfo(device.state).label}`];
  if (device.nomination) parts.push(nominationText(device));
  if (device.use) parts.push(device.use);
  const claims = asList(device.claims).map(claimName);
  if (claims.length) parts.push(`${claims.length === 1 ? "claim" : "claims"} ${claims.join(", ")}`);
  const pods = asList(device.pods);
  if (pods.length) parts.push(`${pods.length === 1 ? "pod" : "pods"} ${pods.join(", ")}`);
  const taints = asList(device.taints);
  if (taints.length) parts.push(`tainted ${taints.map(taintText).join(", ")}`);
  parts.push(`${device.driver}, pool ${device.pool}`);
  return parts.join("; ");
}

// --- the page's state -----------------------------------------------------------------------------

const view = {
  filters: { driver: "", deviceClass: "", label: "", namespace: "", q: "" },
  offset: 0,
  limit: 50,
  revision: null,
  summary: null,
  page: null,
  pending: null,
  pools: null,
  poolsFetchedAt: 0,
  poolsRevision: null,
  showAllPools: false,
  highlight: "",
  /** The open detail panel: {kind: "node", node, deviceId} or {kind: "pod", pod}. */
  detail: null,
  detailData: null,
  devices: new Map(), // device id -> device, for the tooltip
  rows: new Map(), // node name -> {key, element}
  mode: "connecting",
};

// Hooks for tests and bench/ui_page.py: render counts and timings (performance marks too).
const deviceMap = {
  view,
  renders: 0,
  firstRenderMs: null,
  lastRender: null,
  updates: [],
  errors: [],
  refresh: () => refresh("manual"),
  /** True while a re-fetch runs (or another one is queued behind it). */
  get busy() {
    return inflight !== null;
  },
};
window.deviceMap = deviceMap;

function readLocation() {
  const params = new URLSearchParams(window.location.search);
  for (const key of FILTER_KEYS) view.filters[key] = params.get(key) || "";
  view.offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
  const limit = parseInt(params.get("limit") || "50", 10);
  view.limit = PAGE_SIZES.includes(limit) ? limit : 50;
}

function writeLocation() {
  const params = new URLSearchParams();
  for (const key of FILTER_KEYS) if (view.filters[key]) params.set(key, view.filters[key]);
  if (view.offset) params.set("offset", String(view.offset));
  if (view.limit !== 50) params.set("limit", String(view.limit));
  const search = params.toString();
  const url = `${window.location.pathname}${search ? `?${search}` : ""}${window.location.hash}`;
  if (url !== `${window.location.pathname}${window.location.search}${window.location.hash}`) {
    window.history.replaceState(null, "", url);
  }
}

// --- fetching -------------------------------------------------------------------------------------

let inflight = null;
let again = false;

/** Re-fetch what the page shows; calls while one is running coalesce into one more run after it. */
function refresh(reason) {
  if (inflight) {
    again = true;
    return inflight;
  }
  inflight = (async () => {
    do {
      again = false;
      try {
        await loadAll(reason);
        showError("");
      } catch (err) {
        deviceMap.errors.push(String(err && err.message));
        showError(`Cannot load the device map: ${err.message}`);
        if (view.mode !== "live") setMode("offline");
      }
    } while (again);
  })().finally(() => {
    inflight = null;
  });
  return inflight;
}

function nodeParams() {
  return { ...view.filters, offset: view.offset, limit: view.limit };
}

async function loadAll(reason) {
  const started = performance.now();
  // The pools (1.5 MB at 5000 nodes) do not hold up the first drawing of the map: they follow it.
  const poolsRequest = needPools() ? getJSON(apiURL("api/pools", { driver: view.filters.driver })).catch((err) => err) : null;
  const [summary, page, pending] = await Promise.all([
    getJSON(apiURL("api/summary")),
    getJSON(apiURL("api/nodes", nodeParams())),
    getJSON(apiURL("api/pending", { namespace: view.filters.namespace })),
  ]);
  // A filter change can leave the offset past the end: go to the last page instead.
  if (page.total > 0 && view.offset >= page.total) {
    view.offset = Math.floor((page.total - 1) / view.limit) * view.limit;
    writeLocation();
    again = true;
  }
  view.summary = summary;
  view.page = page;
  view.pending = pending;
  view.revision = Math.max(summary.revision ?? 0, page.revision ?? 0);
  renderSummary(summary);
  renderNodes(page);
  renderPending(pending);
  const now = performance.now();
  deviceMap.renders += 1;
  deviceMap.lastRender = { revision: view.revision, at: now, ms: now - started, reason };
  document.body.dataset.revision = String(view.revision);
  document.body.dataset.renders = String(deviceMap.renders);
  if (deviceMap.firstRenderMs === null) {
    deviceMap.firstRenderMs = now;
    performance.mark("devicemap:first-render");
  }
  performance.mark("devicemap:render");
  document.dispatchEvent(new CustomEvent("devicemap:rendered", { detail: deviceMap.lastRender }));
  if (poolsRequest) {
    const pools = await poolsRequest;
    if (pools instanceof Error) throw pools;
    view.pools = pools;
    view.poolsFetchedAt = performance.now();
    view.poolsRevision = pools.revision;
    renderPools(pools);
  }
  if (view.detail && view.detail.kind === "node" && reason !== "detail") await loadDetail(true);
}

/** Pools are many in a large cluster and change seldom: fetched at most every 5 s on a new revision. */
function needPools() {
  if (!view.pools) return true;
  if (view.poolsRevision === view.revision) return false;
  if (performance.now() - view.poolsFetchedAt < POOLS_REFRESH_MS) {
    schedulePools();
    return false;
  }
  return true;
}

let poolsTimer = null;
function schedulePools() {
  if (poolsTimer) return;
  poolsTimer = setTimeout(async () => {
    poolsTimer = null;
    try {
      const pools = await getJSON(apiURL("api/pools", { driver: view.filters.driver }));
      view.pools = pools;
      view.poolsFetchedAt = performance.now();
      view.poolsRevision = pools.revision;
      renderPools(pools);
    } catch (err) {
      deviceMap.errors.push(String(err && err.message));
    }
  }, POOLS_REFRESH_MS);
}

async function reloadPools() {
  view.pools = null;
  await refresh("filters");
}

// --- live updates ---------------------------------------------------------------------------------

let source = null;
let pollTimer = null;
let sseRetryTimer = null;

function setMode(mode) {
  view.mode = mode;
  const live = $("#live");
  live.dataset.mode = mode;
  live.textContent = { live: "live", polling: "polling every 2 s", offline: "offline", connecting: "connecting…" }[mode] || mode;
  live.title = {
    live: "updates arrive as server-sent events from ui/api/events",
    polling: "the event stream is not available: the page asks for the summary every 2 s",
    offline: "the extender does not answer; retrying",
  }[mode] || "";
}

function onRevision(revision) {
  deviceMap.updates.push({ revision, receivedAt: performance.now() });
  if (deviceMap.updates.length > 100) deviceMap.updates.shift();
  if (revision !== view.revision) refresh("event");
}

function startEvents() {
  if (sseRetryTimer) {
    clearTimeout(sseRetryTimer);
    sseRetryTimer = null;
  }
  if (typeof window.EventSource !== "function") {
    startPolling();
    return;
  }
  try {
    source = new EventSource(apiURL("api/events"));
  } catch (err) {
    startPolling();
    return;
  }
  source.addEventListener("open", () => {
    stopPolling();
    setMode("live");
  });
  source.addEventListener("revision", (event) => {
    let revision = null;
    try {
      revision = JSON.parse(event.data).revision;
    } catch (err) {
      return;
    }
    onRevision(revision);
  });
  source.addEventListener("error", () => {
    // Whatever the reason (no endpoint, a proxy that buffers, the extender restarting): poll, and
    // try the stream again later.
    if (source) source.close();
    source = null;
    startPolling();
    sseRetryTimer = setTimeout(startEvents, SSE_RETRY_MS);
  });
}

function startPolling() {
  if (view.mode !== "offline") setMode("polling");
  if (pollTimer) return;
  const tick = async () => {
    try {
      const summary = await getJSON(apiURL("api/summary"));
      if (view.mode === "offline") setMode("polling");
      if (summary.revision !== view.revision) await refresh("poll");
    } catch (err) {
      setMode("offline");
      showError(`Cannot reach the extender: ${err.message}`);
    }
    if (pollTimer) pollTimer = setTimeout(tick, POLL_MS);
  };
  pollTimer = setTimeout(tick, POLL_MS);
}

function stopPolling() {
  if (pollTimer) clearTimeout(pollTimer);
  pollTimer = null;
}

// --- header: counters, totals, legend, facets -----------------------------------------------------

function renderSummary(summary) {
  const counters = summary.counters || {};
  const totals = summary.totals || {};
  const values = {
    scheduledPods: counters.scheduledPods,
    binds: counters.binds,
    bindFailures: counters.bindFailures,
    pendingPods: summary.pendingPods,
    nodes: totals.nodes,
    devices: totals.devices,
  };
  for (const dd of document.querySelectorAll("#counters [data-counter]")) {
    const value = values[dd.dataset.counter];
    dd.textContent = num(value);
    dd.dataset.value = String(value ?? "");
    dd.classList.toggle("bad", dd.dataset.counter === "bindFailures" && value > 0);
  }
  $("#revision").textContent = `revision ${summary.revision}${summary.synced === false ? " · syncing" : ""}`;
  renderLegend(totals);
  renderFacets(summary.facets || {});
}

function renderLegend(totals) {
  const legend = $("#legend");
  const devices = totals.devices || 0;
  const bar = $("#usage");
  const order = [...STATES.slice(1), STATES[0]]; // in use first, free last
  bar.innerHTML = order.filter(({ state }) => totals[state])
    .map(({ state, label }) => `<span data-state="${state}" style="flex-grow:${totals[state]}" title="${esc(`${label}: ${num(totals[state])}`)}"></span>`)
    .join("");
  const used = devices - (totals.free || 0) - (totals.tainted || 0);
  bar.setAttribute("aria-label", `${num(used)} of ${num(devices)} devices in use`);
  $("#usage-text").textContent = devices ? `${Math.round((used / devices) * 100)}% in use` : "";
  legend.innerHTML = STATES.map(({ state, label, help }) => {
    const count = totals[state] ?? 0;
    const pressed = view.highlight === state;
    const share = devices ? Math.round((count / devices) * 100) : 0;
    return `<li><button type="button" class="chip" data-legend-state="${state}" aria-pressed="${pressed}"
      title="${esc(`${label}: ${help}. ${num(count)} of ${num(devices)} devices (${share}%). Click to highlight.`)}">
      <span class="cell mini" data-state="${state}" aria-hidden="true"></span>
      <span class="chip-label">${esc(label)}</span> <span class="chip-count" data-total="${state}">${num(count)}</span>
    </button></li>`;
  }).join("");
}

function setOptions(select, options, current, anyText) {
  // options: [{value, text, group?}]; the current value stays selectable even when it is gone.
  const values = new Set(options.map((o) => o.value));
  const all = current && !values.has(current) ? [{ value: current, text: `${current} (none now)` }, ...options] : options;
  const key = JSON.stringify(all);
  if (select.dataset.key !== key) {
    let html = `<option value="">${esc(anyText)}</option>`;
    let group = null;
    for (const option of all) {
      if (option.group !== group) {
        if (group !== null) html += "</optgroup>";
        group = option.group ?? null;
        if (group !== null) html += `<optgroup label="${esc(group)}">`;
      }
      html += `<option value="${esc(option.value)}">${esc(option.text)}</option>`;
    }
    if (group !== null) html += "</optgroup>";
    select.innerHTML = html;
    select.dataset.key = key;
  }
  select.value = current;
  select.classList.toggle("set", Boolean(current));
}

function renderFacets(facets) {
  const simple = (list) => asList(list).map((v) => ({ value: v, text: v }));
  setOptions($("#filter-driver"), simple(facets.drivers), view.filters.driver, "all");
  setOptions($("#filter-deviceClass"), simple(facets.deviceClasses), view.filters.deviceClass, "all");
  setOptions($("#filter-namespace"), simple(facets.namespaces), view.filters.namespace, "all");
  const labels = [];
  for (const key of Object.keys(facets.nodeLabels || {}).sort()) {
    const values = asList(facets.nodeLabels[key]);
    labels.push({ value: key, text: `${key} (any value)`, group: key });
    for (const value of values.slice(0, LABEL_VALUES_MAX)) labels.push({ value: `${key}=${value}`, text: `${key}=${value}`, group: key });
  }
  setOptions($("#filter-label"), labels, view.filters.label, "any");
  const active = FILTER_KEYS.some((k) => view.filters[k]);
  $("#filter-clear").hidden = !active;
  $("#filters").dataset.active = String(active);
}

// --- the node map ---------------------------------------------------------------------------------

function cellHTML(device, extraClass = "") {
  const state = device.state || "free";
  if (state === "free" && String(device.use || "").startsWith("unavailable")) extraClass += " unavailable";
  return `<button type="button" class="cell${extraClass}" data-device-id="${esc(device.id)}" data-state="${esc(state)}"
    data-driver="${esc(device.driver)}" data-device="${esc(device.name)}" aria-label="${esc(deviceLabel(device))}"></button>`;
}

/** Partitions sharing a counter set are drawn in one box, labelled by their parent device. */
function groupHTML(devices) {
  const names = devices.map((d) => d.name);
  const parent = devices.find((d) => names.every((n) => n === d.name || n.startsWith(`${d.name}-`)));
  const label = parent ? parent.name : devices[0].group;
  const busy = devices.filter((d) => d.state !== "free").length;
  const cells = devices.map((d) => cellHTML(d, d === parent ? " parent" : "")).join("");
  return `<div class="part-group" data-group="${esc(devices[0].group)}" role="group"
    aria-label="${esc(`${label}: ${devices.length} devices sharing counters ${devices[0].group}, ${busy} in use`)}">
    <span class="group-label" title="${esc(`counter set ${devices[0].group}`)}">${esc(label)}</span>${cells}</div>`;
}

function devicesHTML(devices) {
  // By driver (in order of appearance), then each counter-set group at the place of its first device.
  const drivers = new Map();
  for (const device of devices) {
    if (!drivers.has(device.driver)) drivers.set(device.driver, []);
    drivers.get(device.driver).push(device);
  }
  let html = "";
  for (const [driver, list] of drivers) {
    const groups = new Map();
    const items = [];
    for (const device of list) {
      if (device.group) {
        const key = `${device.pool}\u0000${device.group}`;
        if (!groups.has(key)) {
          groups.set(key, []);
          items.push(groups.get(key));
        }
        groups.get(key).push(device);
      } else {
        items.push(device);
      }
    }
    const body = items.map((item) => (Array.isArray(item) ? groupHTML(item) : cellHTML(item))).join("");
    html += `<div class="driver" data-driver="${esc(driver)}"><span class="driver-name" title="${esc(driver)}">${esc(shortDriver(driver))}</span><div class="cells">${body}</div></div>`;
  }
  return html;
}

function countsHTML(counts) {
  return STATES.filter(({ state }) => counts && counts[state])
    .map(({ state, label }) => `<span class="count" data-count-state="${state}"><span class="dot" data-state="${state}"></span>${num(counts[state])} ${esc(label)}</span>`)
    .join("");
}

function labelsHTML(labels) {
  const zone = labels && (labels["topology.kubernetes.io/zone"] || labels["failure-domain.beta.kubernetes.io/zone"]);
  const title = labels ? Object.entries(labels).map(([k, v]) => `${k}=${v}`).join("\n") : "";
  return `<span class="node-labels" title="${esc(title)}">${zone ? `<span class="zone">${esc(zone)}</span>` : ""}</span>`;
}

function poolWarningsHTML(pools) {
  return asList(pools)
    .map(
      (p) => `<span class="pool-warning" data-status="${esc(p.status)}" title="${esc(`pool ${p.driver}/${p.pool} is ${p.status}${p.reason ? `: ${p.reason}` : ""}; its devices are not offered`)}">${esc(
        shortDriver(p.driver),
      )} pool ${esc(p.status)}</span>`,
    )
    .join("");
}

/** A row warns of the node's incomplete and invalid pools (their devices are not offered, so not drawn). */
function nodeRowHTML(node) {
  const devices = asList(node.devices);
  const pools = asList(node.poolProblems);
  return `<div class="node-head">
      <div class="node-title"><button type="button" class="node-name" data-node-open="${esc(node.name)}" title="details of ${esc(node.name)}">${esc(node.name)}</button>
      ${labelsHTML(node.labels)}</div>
      <span class="node-counts">${countsHTML(node.counts)}${devices.length || node.error ? "" : '<span class="muted">no devices</span>'}</span>
    </div>
    <div class="devices">${devicesHTML(devices)}${poolWarningsHTML(pools)}${
      node.error ? `<span class="pool-warning" data-status="invalid" title="${esc(node.error)}">${esc(node.error)}</span>` : ""
    }</div>`;
}

function renderNodes(page) {
  const container = $("#nodes");
  const nodes = asList(page.nodes);
  view.devices = new Map();
  for (const node of nodes) for (const device of asList(node.devices)) view.devices.set(device.id, { ...device, node: node.name });
  if (!nodes.length) {
    const filtered = FILTER_KEYS.some((k) => view.filters[k]);
    container.innerHTML = `<p class="empty">${filtered ? "No node matches the filters." : "The extender knows no nodes yet."}</p>`;
    view.rows = new Map();
  } else {
    // Keyed update: rows whose data did not change keep their elements (and focus, and hover).
    if (!container.querySelector(".node")) container.innerHTML = "";
    const rows = new Map();
    let previous = null;
    for (const node of nodes) {
      const key = JSON.stringify(node);
      let row = view.rows.get(node.name);
      if (!row || row.key !== key) {
        const element = row ? row.element : document.createElement("article");
        element.className = "node";
        element.dataset.node = node.name;
        element.setAttribute("aria-label", `node ${node.name}`);
        element.innerHTML = nodeRowHTML(node);
        row = { key, element };
      }
      rows.set(node.name, row);
      const expected = previous ? previous.nextSibling : container.firstChild;
      if (expected !== row.element) container.insertBefore(row.element, expected);
      previous = row.element;
    }
    for (const [name, row] of view.rows) if (!rows.has(name)) row.element.remove();
    while (previous && previous.nextSibling) previous.nextSibling.remove();
    view.rows = rows;
  }
  container.setAttribute("aria-busy", "false");
  container.dataset.total = String(page.total ?? nodes.length);
  if (view.selectedDevice) markSelected(view.selectedDevice);
  renderPager(page);
  refreshTooltip();
}

function renderPager(page) {
  const total = page.total ?? 0;
  const first = total ? view.offset + 1 : 0;
  const last = Math.min(view.offset + asList(page.nodes).length, total);
  const info = $("#page-info");
  info.textContent = total ? `nodes ${num(first)}–${num(last)} of ${num(total)}` : "no nodes";
  info.dataset.first = String(first);
  info.dataset.last = String(last);
  info.dataset.total = String(total);
  const atStart = view.offset <= 0;
  const atEnd = view.offset + view.limit >= total;
  $("#page-first").disabled = atStart;
  $("#page-prev").disabled = atStart;
  $("#page-next").disabled = atEnd;
  $("#page-last").disabled = atEnd;
  $("#pager").hidden = total <= PAGE_SIZES[0] && view.offset === 0 && view.limit >= total;
  $("#page-size").value = String(view.limit);
}

function goTo(offset) {
  const total = (view.page && view.page.total) || 0;
  const lastPage = total ? Math.floor((total - 1) / view.limit) * view.limit : 0;
  view.offset = Math.max(0, Math.min(offset, lastPage));
  writeLocation();
  refresh("page");
}

// --- tooltip --------------------------------------------------------------------------------------

let tooltipFor = null;

function tooltipHTML(device) {
  const info = stateInfo(device.state);
  const claims = asList(device.claims).map(claimName);
  const pods = asList(device.pods);
  const taints = asList(device.taints).map(taintText);
  const rows = [
    ["node", device.node],
    ["pool", device.pool],
    ["group", device.group],
    ["use", device.use],
    ["nominated", nominationText(device)],
    [claims.length === 1 ? "claim" : "claims", claims.join("\n")],
    [pods.length === 1 ? "pod" : "pods", pods.join("\n")],
    ["taints", taints.join("\n")],
  ].filter(([, v]) => v);
  return `<div class="tt-head"><span class="cell mini" data-state="${esc(device.state)}"></span>
      <strong>${esc(device.name)}</strong> <span class="state-name" data-state-text="${esc(device.state)}">${esc(info.label)}</span></div>
    <div class="tt-driver">${esc(device.driver)}</div>
    <dl>${rows.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`).join("")}</dl>
    <div class="tt-hint">click for details</div>`;
}

function showTooltip(cell) {
  const device = view.devices.get(cell.dataset.deviceId);
  const tooltip = $("#tooltip");
  if (!device) {
    hideTooltip();
    return;
  }
  tooltipFor = cell;
  tooltip.innerHTML = tooltipHTML(device);
  tooltip.hidden = false;
  tooltip.dataset.deviceId = device.id;
  const rect = cell.getBoundingClientRect();
  const tip = tooltip.getBoundingClientRect();
  let left = rect.left + rect.width / 2 - tip.width / 2;
  left = Math.max(8, Math.min(left, window.innerWidth - tip.width - 8));
  let top = rect.bottom + 8;
  if (top + tip.height > window.innerHeight - 8) top = rect.top - tip.height - 8;
  tooltip.style.left = `${Math.round(left)}px`;
  tooltip.style.top = `${Math.round(Math.max(8, top))}px`;
}

function hideTooltip() {
  tooltipFor = null;
  $("#tooltip").hidden = true;
}

/** After a re-render, the tooltip follows its device (the cell element may be new). */
function refreshTooltip() {
  if (!tooltipFor) return;
  const id = tooltipFor.dataset.deviceId;
  const cell = document.querySelector(`#nodes .cell[data-device-id="${CSS.escape(id)}"]`);
  if (cell && (cell.matches(":hover") || cell === document.activeElement)) showTooltip(cell);
  else hideTooltip();
}

// --- detail panel ---------------------------------------------------------------------------------

function openDetail() {
  const panel = $("#detail");
  panel.hidden = false;
  document.body.classList.add("detail-open");
}

function closeDetail() {
  $("#detail").hidden = true;
  document.body.classList.remove("detail-open");
  view.detail = null;
  view.detailData = null;
  view.selectedDevice = null;
  markSelected(null);
}

function markSelected(id) {
  for (const cell of document.querySelectorAll("#nodes .cell.selected")) cell.classList.remove("selected");
  if (!id) return;
  const cell = document.querySelector(`#nodes .cell[data-device-id="${CSS.escape(id)}"]`);
  if (cell) cell.classList.add("selected");
}

async function showNode(node, deviceId = null) {
  view.detail = { kind: "node", node, deviceId };
  view.selectedDevice = deviceId;
  markSelected(deviceId);
  $("#detail-title").textContent = node;
  $("#detail").dataset.kind = "node";
  $("#detail").dataset.node = node;
  if (!view.detailData || view.detailData.name !== node) $("#detail-body").innerHTML = '<p class="muted">Loading…</p>';
  openDetail();
  await loadDetail(false);
}

async function loadDetail(quiet) {
  const detail = view.detail;
  if (!detail || detail.kind !== "node") return;
  try {
    const data = await getJSON(apiURL(`api/nodes/${encodeURIComponent(detail.node)}`));
    if (view.detail !== detail) return;
    view.detailData = { ...data, name: data.name || detail.node };
    renderNodeDetail(view.detailData, detail.deviceId);
  } catch (err) {
    if (view.detail !== detail) return;
    if (quiet && err.status !== 404) return;
    $("#detail-body").innerHTML = `<p class="error">${esc(err.status === 404 ? `The extender does not know node ${detail.node} (any more).` : err.message)}</p>`;
  }
}

function table(rows, headers, attrs = "") {
  if (!rows.length) return '<p class="muted">none</p>';
  const head = headers ? `<thead><tr>${headers.map((h) => `<th scope="col">${esc(h)}</th>`).join("")}</tr></thead>` : "";
  return `<table class="kv"${attrs}>${head}<tbody>${rows.join("")}</tbody></table>`;
}

function kvTable(object) {
  const entries = Object.entries(object || {}).sort(([a], [b]) => a.localeCompare(b));
  return table(entries.map(([k, v]) => `<tr><th scope="row">${esc(k)}</th><td>${esc(scalar(v))}</td></tr>`));
}

function poolStatusHTML(pool) {
  const status = pool.status || "complete";
  return `<span class="status" data-status="${esc(status)}">${esc(status)}</span>${pool.reason ? ` <span class="reason">${esc(pool.reason)}</span>` : ""}`;
}

/** The claims holding a device: objects {claim, pods, request, adminAccess} or plain names. */
function claimsHTML(device) {
  const claims = asList(device.claims);
  if (!claims.length) return '<p class="muted">No claim holds this device.</p>';
  const podsOf = asList(device.pods);
  const rows = claims.map((claim) => {
    if (typeof claim === "string") return `<tr><td>${esc(claim)}</td><td></td><td>${esc(podsOf.join(", "))}</td><td></td></tr>`;
    return `<tr><td>${esc(claim.claim || claim.name)}</td><td>${esc(claim.request || "")}</td><td>${esc(asList(claim.pods).join(", "))}</td><td>${claim.adminAccess ? "admin" : ""}</td></tr>`;
  });
  return table(rows, ["claim", "request", "pods", "access"], ' data-table="claims"');
}

function deviceDetailHTML(device) {
  const info = stateInfo(device.state);
  const facts = [
    ["id", device.id],
    ["driver", device.driver],
    ["pool", device.pool],
    ["counter set", device.group],
    ["use", device.use],
    ["nominated", nominationText(device)],
    ["taints", asList(device.taints).map(taintText).join(", ")],
  ].filter(([, v]) => v);
  return `<section class="device-detail" data-detail-device="${esc(device.id)}">
    <h3><span class="cell mini" data-state="${esc(device.state)}"></span> ${esc(device.name)}
      <span class="state-name" data-state-text="${esc(device.state)}">${esc(info.label)}</span></h3>
    ${table(facts.map(([k, v]) => `<tr><th scope="row">${esc(k)}</th><td>${esc(v)}</td></tr>`))}
    <h4>Claims and pods</h4>${claimsHTML(device)}
    <h4>Attributes</h4>${kvTable(device.attributes)}
    <h4>Capacity</h4>${kvTable(device.capacity)}
  </section>`;
}

function renderNodeDetail(node, deviceId) {
  const devices = asList(node.devices);
  const device = deviceId ? devices.find((d) => d.id === deviceId) : null;
  const labels = Object.entries(node.labels || {}).sort(([a], [b]) => a.localeCompare(b));
  const pools = asList(node.pools);
  const deviceRows = devices.map(
    (d) => `<tr class="${d.id === deviceId ? "selected" : ""}" data-select-device="${esc(d.id)}" tabindex="0">
      <td><span class="cell mini" data-state="${esc(d.state)}"></span></td><td>${esc(d.name)}</td>
      <td>${esc(stateInfo(d.state).label)}${d.use ? ` · ${esc(d.use)}` : ""}</td><td>${esc(asList(d.claims).map(claimName).join(", "))}</td></tr>`,
  );
  const missing = deviceId && !device ? `<p class="error">Device ${esc(deviceId)} is no longer on this node.</p>` : "";
  $("#detail-body").innerHTML = `${missing}${device ? deviceDetailHTML(device) : ""}
    <section><h4>Node</h4>
      <p class="node-counts">${countsHTML(node.counts)}</p>
      <div class="labels">${labels.map(([k, v]) => `<span class="label-chip">${esc(k)}=${esc(v)}</span>`).join("") || '<span class="muted">no labels</span>'}</div>
    </section>
    <section><h4>Devices (${devices.length})</h4>${table(deviceRows, ["", "device", "state", "claims"], ' data-table="devices"')}</section>
    <section><h4>Pools</h4>${table(
      pools.map((p) => `<tr><td>${esc(p.driver)}</td><td>${esc(p.pool)}</td><td>${esc(p.generation)}</td><td>${poolStatusHTML(p)}</td></tr>`),
      ["driver", "pool", "gen", "status"],
    )}</section>`;
  $("#detail").dataset.device = device ? device.id : "";
}

async function showPod(pod) {
  view.detail = { kind: "pod", pod };
  view.selectedDevice = null;
  markSelected(null);
  $("#detail-title").textContent = `Why is ${pod} pending?`;
  $("#detail").dataset.kind = "pod";
  $("#detail").dataset.pod = pod;
  $("#detail-body").innerHTML = '<p class="muted">Asking the extender…</p>';
  openDetail();
  const [namespace, name] = pod.split("/");
  const entry = asList(view.pending && view.pending.pods).find((p) => p.pod === pod);
  try {
    const why = await getJSON(debugURL(`debug/why/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`));
    if (view.detail && view.detail.pod === pod) $("#detail-body").innerHTML = whyHTML(why, entry);
  } catch (err) {
    if (view.detail && view.detail.pod === pod) {
      const text = err.status === 404 ? `The extender does not know pod ${pod} (any more).` : err.message;
      $("#detail-body").innerHTML = `<p class="error">${esc(text)}</p>${entry ? pendingDetailHTML(entry) : ""}`;
    }
  }
}

function pendingDetailHTML(entry) {
  return `<section><h4>From the pending list</h4><p>${esc(entry.summary || "not explained yet")}</p>${closestHTML(entry.closest)}</section>`;
}

function closestHTML(closest) {
  const list = asList(closest);
  if (!list.length) return "";
  return `<ul class="closest">${list
    // the detail names the claim, the request and what is short: more than the node-agnostic message
    .map((c) => `<li><button type="button" class="link" data-node-open="${esc(c.node)}">${esc(c.node)}</button> <span title="${esc(c.message || "")}">${esc(c.detail || c.message || c.reason || "")}</span></li>`)
    .join("")}</ul>`;
}

/** A generic, readable rendering of any JSON value (the why answer's known parts get their own). */
function valueHTML(value, depth = 0) {
  if (value === null || value === undefined || value === "") return '<span class="muted">–</span>';
  if (typeof value !== "object") return esc(value);
  if (Array.isArray(value)) {
    if (!value.length) return '<span class="muted">none</span>';
    if (value.every((v) => typeof v !== "object" || v === null)) return esc(value.join(", "));
    return `<ul class="tree">${value.map((v) => `<li>${valueHTML(v, depth + 1)}</li>`).join("")}</ul>`;
  }
  const entries = Object.entries(value);
  if (!entries.length) return '<span class="muted">–</span>';
  return `<dl class="tree">${entries.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${valueHTML(v, depth + 1)}</dd>`).join("")}</dl>`;
}

function whyHTML(why, entry) {
  // The shape of views/why.py (docs/kubectl-dra.md): summary, fits, reasons, closest, suggestions,
  // claims, preemption, error; anything else is shown generically under "More".
  const known = new Set(["pod", "uid", "bound", "error", "summary", "nodes", "fits", "reasons", "closest", "suggestions", "claims", "preemption"]);
  let html = `<section class="why" data-why="${esc(why.pod || "")}">`;
  const summary = why.summary || (entry && entry.summary);
  if (summary) html += `<p class="why-summary" data-why-summary>${esc(summary)}</p>`;
  if (why.error) html += `<p class="error">${esc(why.error)}</p>`;
  const claims = asList(why.claims);
  if (claims.length) html += `<p class="muted">${esc(plural(claims.length, "claim"))}: ${esc(claims.map(claimName).join(", "))}</p>`;
  const fits = why.fits || {};
  if (fits.count) {
    const names = asList(fits.nodes);
    html += `<h4>Fits now (${esc(num(fits.count))})</h4><p>${names
      .map((n) => `<button type="button" class="link mono" data-node-open="${esc(n)}">${esc(n)}</button>`)
      .join(", ")}${fits.count > names.length ? ", …" : ""}</p>`;
  }
  const reasons = asList(why.reasons);
  if (reasons.length) {
    html += `<h4>Nodes by reason</h4><ul class="reasons">${reasons
      .map((g) => {
        const nodes = asList(g.nodes);
        const more = (g.count ?? nodes.length) > nodes.length ? ", …" : "";
        return `<li><strong>${esc(num(g.count ?? nodes.length))}</strong> ${esc(g.reason || "")}${
          g.outcome === "FailedAndUnresolvable" ? ' <span class="status">unresolvable</span>' : ""
        }${nodes.length ? `<div class="muted mono">${esc(nodes.join(", "))}${more}</div>` : ""}</li>`;
      })
      .join("")}</ul>`;
  }
  const closest = asList(why.closest).length ? asList(why.closest) : asList(entry && entry.closest);
  if (closest.length) {
    html += `<h4>Closest nodes</h4><ul class="closest why-closest">${closest
      .map((c) => {
        const facts = [];
        if (typeof c.requests === "number") facts.push(`${c.satisfied ?? 0}/${c.requests} requests satisfied`);
        if (c.devicesShort) facts.push(`${c.devicesShort} device${c.devicesShort === 1 ? "" : "s"} short`);
        if (c.devicesMissing) facts.push(`${c.devicesMissing} missing outright`);
        return `<li><button type="button" class="link" data-node-open="${esc(c.node)}">${esc(c.node)}</button> <span>${esc(c.message || "")}</span>${
          facts.length ? `<div class="muted">${esc(facts.join(" · "))}</div>` : ""
        }${c.detail && c.detail !== c.message ? `<div class="detail-text">${esc(c.detail)}</div>` : ""}${
          c.preemption ? `<div class="detail-text">preemption: ${esc(c.preemption)}</div>` : ""
        }</li>`;
      })
      .join("")}</ul>`;
  }
  const suggestions = asList(why.suggestions);
  if (suggestions.length) {
    html += `<h4>What would have to change</h4><ul class="suggestions">${suggestions
      .map((s) => (typeof s === "string" ? `<li>${esc(s)}</li>` : `<li data-kind="${esc(s.kind || "")}">${esc(s.message || JSON.stringify(s))}</li>`))
      .join("")}</ul>`;
  }
  if (why.preemption && typeof why.preemption === "object") {
    const p = why.preemption;
    html += `<h4>Preemption</h4><p>${p.enabled === false ? "disabled; " : ""}${esc(num(p.helps ?? 0))} of ${esc(num(p.tried ?? 0))} nodes would fit after evicting lower-priority pods (priority ${esc(p.priority ?? 0)}).</p>`;
    if (p.nodes && Object.keys(p.nodes).length) html += valueHTML(p.nodes);
  }
  const rest = Object.fromEntries(Object.entries(why).filter(([k]) => !known.has(k)));
  if (Object.keys(rest).length) html += `<h4>More</h4>${valueHTML(rest)}`;
  html += `<details class="raw"><summary>raw JSON</summary><pre>${esc(JSON.stringify(why, null, 2))}</pre></details></section>`;
  return html;
}

// --- pending pods ---------------------------------------------------------------------------------

function renderPending(pending) {
  const pods = asList(pending && pending.pods);
  $("#pending-count").textContent = num(pods.length);
  const list = $("#pending-list");
  if (!pods.length) {
    list.innerHTML = '<li class="empty">No pod is waiting for devices.</li>';
    return;
  }
  const shown = pods.slice(0, PENDING_MAX);
  list.innerHTML =
    shown
      .map((pod) => {
        const claims = [...asList(pod.claims), ...asList(pod.templates).map((t) => `${t} (template)`)];
        const reason = pod.explained ? pod.summary || "" : "";
        const fit = /^(\d+)\/(\d+) nodes/.exec(reason);
        const fits = fit ? (Number(fit[1]) > 0 ? "some" : "none") : "";
        return `<li class="pod" data-pod="${esc(pod.pod)}" data-explained="${pod.explained ? "true" : "false"}" data-fits="${fits}" data-rejected="${pod.rejected ? "true" : "false"}">
        <div class="pod-head">
          <button type="button" class="pod-name link" data-why="${esc(pod.pod)}" title="why is it pending? (debug/why)">${esc(pod.pod)}</button>
          ${pod.rejected ? '<span class="rejected-badge" title="the extender\'s last filter of this pod found no node for it">no node fits</span>' : ""}
          <span class="pod-meta">${pod.priority ? `prio ${esc(pod.priority)} · ` : ""}${esc(age(pod.ageSeconds))}</span>
        </div>
        ${claims.length ? `<div class="pod-claims muted" title="${esc(claims.join("\n"))}">${esc(plural(claims.length, "claim"))}: ${esc(claims.join(", "))}</div>` : ""}
        <p class="reason" data-reason>${reason ? esc(reason) : '<span class="muted" title="the extender explains the first pending pods in the background; click the pod to ask now">not explained yet</span>'}</p>
        ${pod.stale ? '<p class="stale muted" title="explained for an older state of the cluster; being explained again">explained for an older state</p>' : ""}
        ${pod.error ? `<p class="error">${esc(pod.error)}</p>` : ""}
        ${pod.explained ? closestHTML(asList(pod.closest).slice(0, 3)) : ""}
      </li>`;
      })
      .join("") + (pods.length > shown.length ? `<li class="more muted">and ${num(pods.length - shown.length)} more</li>` : "");
}

// --- pools ----------------------------------------------------------------------------------------

function renderPools(data) {
  const pools = asList(data && data.pools);
  const byStatus = {};
  for (const pool of pools) byStatus[pool.status || "complete"] = (byStatus[pool.status || "complete"] || 0) + 1;
  $("#pools-count").textContent = num(pools.length);
  const problems = pools.filter((p) => p.status && p.status !== "complete");
  $("#pools-summary").innerHTML = Object.entries(byStatus)
    .sort(([a], [b]) => (a === "complete" ? -1 : b === "complete" ? 1 : a.localeCompare(b)))
    .map(([status, n]) => `<span class="status" data-status="${esc(status)}">${esc(num(n))} ${esc(status)}</span>`)
    .join(" ");
  const all = view.showAllPools || pools.length <= POOLS_SHOWN;
  const rank = { invalid: 0, incomplete: 1 };
  const ordered = (all ? pools : problems)
    .map((pool, index) => ({ pool, index }))
    .sort((a, b) => (rank[a.pool.status] ?? 2) - (rank[b.pool.status] ?? 2) || a.index - b.index)
    .map(({ pool }) => pool);
  const rows = ordered.slice(0, POOLS_MAX_ROWS);
  const toggle = $("#pools-toggle");
  toggle.hidden = pools.length <= POOLS_SHOWN;
  toggle.textContent = view.showAllPools ? "show only incomplete and invalid pools" : `show all ${num(pools.length)} pools`;
  let html = "";
  if (rows.length) {
    html = table(
      rows.map(
        (p) => `<tr data-pool="${esc(`${p.driver}/${p.pool}`)}" data-status="${esc(p.status || "complete")}">
        <td title="${esc(p.driver)}">${esc(shortDriver(p.driver))}</td>
        <td>${p.node ? `<button type="button" class="link" data-node-open="${esc(p.node)}">${esc(p.pool)}</button>` : esc(p.pool)}</td>
        <td class="num" title="generation">${esc(p.generation)}</td>
        <td class="num" title="slices of the newest generation / resourceSliceCount">${esc(p.slices)}/${esc(p.expectedSlices)}</td>
        <td class="num" title="devices">${esc(p.devices)}</td>
        <td><span class="status" data-status="${esc(p.status || "complete")}">${esc(p.status || "complete")}</span></td></tr>${
          p.reason ? `<tr class="pool-reason" data-status="${esc(p.status)}"><td colspan="6">${esc(p.reason)}</td></tr>` : ""
        }`,
      ),
      ["driver", "pool", "gen", "slices", "devices", "status"],
      ' data-table="pools"',
    );
    if ((all ? pools : problems).length > rows.length) html += `<p class="muted">first ${num(rows.length)} shown; filter by driver to narrow.</p>`;
  } else if (pools.length) {
    html = '<p class="muted ok">Every pool is complete.</p>';
  } else {
    html = '<p class="muted">No pools.</p>';
  }
  $("#pools-table-wrap").innerHTML = html;
}

// --- errors ---------------------------------------------------------------------------------------

function showError(text) {
  const banner = $("#error");
  banner.textContent = text;
  banner.hidden = !text;
}

// --- events ---------------------------------------------------------------------------------------

let searchTimer = null;

function onFilterChange(key, value) {
  if (view.filters[key] === value) return;
  view.filters[key] = value;
  view.offset = 0;
  if (key === "q") $("#filter-q").classList.toggle("set", Boolean(value));
  writeLocation();
  if (key === "driver") reloadPools();
  else refresh("filters");
}

function wire() {
  for (const key of ["driver", "deviceClass", "label", "namespace"]) {
    $(`#filter-${key}`).addEventListener("change", (event) => onFilterChange(key, event.target.value));
  }
  const search = $("#filter-q");
  search.value = view.filters.q;
  search.classList.toggle("set", Boolean(view.filters.q));
  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => onFilterChange("q", search.value.trim()), 200);
  });
  $("#filters").addEventListener("submit", (event) => {
    event.preventDefault();
    clearTimeout(searchTimer);
    onFilterChange("q", search.value.trim());
  });
  $("#filter-clear").addEventListener("click", () => {
    for (const key of FILTER_KEYS) view.filters[key] = "";
    search.value = "";
    search.classList.remove("set");
    view.offset = 0;
    writeLocation();
    reloadPools();
  });

  $("#page-first").addEventListener("click", () => goTo(0));
  $("#page-prev").addEventListener("click", () => goTo(view.offset - view.limit));
  $("#page-next").addEventListener("click", () => goTo(view.offset + view.limit));
  $("#page-last").addEventListener("click", () => goTo(Number.MAX_SAFE_INTEGER));
  $("#page-size").addEventListener("change", (event) => {
    view.limit = parseInt(event.target.value, 10) || 50;
    view.offset = Math.floor(view.offset / view.limit) * view.limit;
    writeLocation();
    refresh("page");
  });

  $("#legend").addEventListener("click", (event) => {
    const chip = event.target.closest("[data-legend-state]");
    if (!chip) return;
    const state = chip.dataset.legendState;
    view.highlight = view.highlight === state ? "" : state;
    $("#nodes").dataset.highlight = view.highlight;
    for (const other of document.querySelectorAll("#legend [data-legend-state]")) {
      other.setAttribute("aria-pressed", String(other.dataset.legendState === view.highlight));
    }
  });

  const nodes = $("#nodes");
  nodes.addEventListener("mouseover", (event) => {
    const cell = event.target.closest(".cell[data-device-id]");
    if (cell && cell !== tooltipFor) showTooltip(cell);
    else if (!cell && tooltipFor) hideTooltip();
  });
  nodes.addEventListener("mouseleave", hideTooltip);
  nodes.addEventListener("focusin", (event) => {
    const cell = event.target.closest(".cell[data-device-id]");
    if (cell) showTooltip(cell);
  });
  nodes.addEventListener("focusout", hideTooltip);

  document.addEventListener("click", (event) => {
    const cell = event.target.closest("#nodes .cell[data-device-id]");
    if (cell) {
      const device = view.devices.get(cell.dataset.deviceId);
      hideTooltip();
      if (device) showNode(device.node, device.id);
      return;
    }
    const nodeButton = event.target.closest("[data-node-open]");
    if (nodeButton) {
      showNode(nodeButton.dataset.nodeOpen);
      return;
    }
    const why = event.target.closest("[data-why]");
    if (why) {
      showPod(why.dataset.why);
      return;
    }
    const row = event.target.closest("[data-select-device]");
    if (row && view.detail && view.detail.kind === "node") showNode(view.detail.node, row.dataset.selectDevice);
  });
  $("#detail-body").addEventListener("keydown", (event) => {
    const row = event.target.closest("[data-select-device]");
    if (row && (event.key === "Enter" || event.key === " ") && view.detail) {
      event.preventDefault();
      showNode(view.detail.node, row.dataset.selectDevice);
    }
  });
  $("#detail-close").addEventListener("click", closeDetail);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      if (tooltipFor) hideTooltip();
      else if (!$("#detail").hidden) closeDetail();
    }
  });
  $("#pools-toggle").addEventListener("click", () => {
    view.showAllPools = !view.showAllPools;
    if (view.pools) renderPools(view.pools);
  });
  window.addEventListener("scroll", () => tooltipFor && hideTooltip(), { passive: true });
}

// --- start ----------------------------------------------------------------------------------------

readLocation();
wire();
setMode("connecting");
refresh("load").then(() => startEvents());
