"""How ``kubectl dra`` prints: kubectl-style tables, the why document as text, JSON and YAML.

``-o json`` and ``-o yaml`` print the documents the extender's endpoints give (``debug/why``, the
device rows, the simulation), so a script reads the same shape from either source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import orjson
import yaml

__all__ = ["print_devices", "print_document", "print_simulation", "print_why", "table"]


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, three spaces apart, as ``kubectl get`` prints them."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def print_document(document: Any, fmt: str, out: TextIO) -> None:
    if fmt == "json":
        out.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        out.write(yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=120))


def print_why(doc: Mapping[str, Any], wide: bool, out: TextIO) -> None:
    out.write(f"Pod {doc.get('pod')}: {doc.get('summary')}\n")
    claims = doc.get("claims") or []
    if claims:
        out.write(f"Claims: {', '.join(claims)}\n")
    fits = doc.get("fits") or {}
    if fits.get("count"):
        more = fits["count"] - len(fits.get("nodes") or [])
        out.write(f"Fits on: {', '.join(fits['nodes'])}" + (f" and {more} more" if more > 0 else "") + "\n")
    reasons = doc.get("reasons") or []
    if reasons:
        out.write("\n")
        rows = []
        for r in reasons:
            examples = ", ".join(r.get("nodes") or [])
            more = r["count"] - len(r.get("nodes") or [])
            rows.append([str(r["count"]), r["outcome"], r["reason"], examples + (f" (+{more})" if more > 0 else "")])
        out.write(table(["NODES", "OUTCOME", "REASON", "EXAMPLES"], rows))
    closest = doc.get("closest") or []
    if closest:
        out.write("\nClosest nodes:\n")
        if wide:
            rows = [
                [
                    c["node"],
                    f"{c.get('satisfied', 0)}/{c.get('requests', 0)}",
                    str(c.get("devicesShort", 0)),
                    str(c.get("devicesMissing", 0)),
                    c.get("detail") or c.get("message") or "",
                ]
                for c in closest
            ]
            out.write(_indent(table(["NODE", "REQUESTS OK", "SHORT", "MISSING", "DETAIL"], rows)))
        else:
            for c in closest:
                out.write(f"  {c['node']}: {c.get('detail') or c.get('message')}\n")
    suggestions = doc.get("suggestions") or []
    if suggestions:
        out.write("\nWhat would have to change:\n")
        for s in suggestions:
            out.write(f"  - {s['message']}\n")


def print_devices(rows: Sequence[Mapping[str, Any]], wide: bool, out: TextIO) -> None:
    headers = ["NODE", "DRIVER", "POOL", "DEVICE", "STATE", "CLAIMS"]
    if wide:
        headers += ["PODS", "ATTRIBUTES", "CAPACITY"]
    lines = []
    for row in rows:
        line = [
            row["node"],
            row["driver"],
            row["pool"],
            row["device"],
            row["state"],
            ",".join(row.get("claims") or []) or "<none>",
        ]
        if wide:
            line += [
                ",".join(row.get("pods") or []) or "<none>",
                _pairs(row.get("attributes") or {}),
                _pairs(row.get("capacity") or {}),
            ]
        lines.append(line)
    if not lines:
        out.write("No devices found.\n")
        return
    out.write(table(headers, lines))


def print_simulation(document: Mapping[str, Any], wide: bool, out: TextIO) -> None:
    rows = []
    for entry in document.get("pods") or ():
        if entry.get("node"):
            devices = _devices_text(entry.get("devices") or ())
            result = devices or "(no devices)"
        else:
            result = entry.get("summary") or entry.get("error") or ""
        row = [entry["pod"], entry.get("node") or "<none>", result]
        if wide:
            fits = entry.get("fits") or {}
            row.insert(2, ",".join(fits.get("nodes") or []) or "<none>")
        rows.append(row)
    headers = ["POD", "NODE", "FITS ON", "DEVICES / WHY NOT"] if wide else ["POD", "NODE", "DEVICES / WHY NOT"]
    out.write(table(headers, rows))
    if wide:
        for entry in document.get("pods") or ():
            if not entry.get("node") and entry.get("suggestions"):
                out.write(f"\n{entry['pod']}: what would have to change:\n")
                for s in entry["suggestions"]:
                    out.write(f"  - {s['message']}\n")


def _devices_text(devices: Sequence[Mapping[str, str]]) -> str:
    """``gpus: gpu.example.com/node-2/{gpu-4,gpu-5}``: the devices of one request and pool together."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for d in devices:
        groups.setdefault((d["request"], d["driver"], d["pool"]), []).append(d["device"])
    parts = []
    for (request, driver, pool), names in groups.items():
        shown = names[0] if len(names) == 1 else "{" + ",".join(names) + "}"
        parts.append(f"{request}: {driver}/{pool}/{shown}")
    return "; ".join(parts)


def _pairs(values: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items()) or "<none>"


def _indent(text: str) -> str:
    return "".join(f"  {line}\n" for line in text.splitlines())
