"""The layering rules of DESIGN.md, checked mechanically.

The core must import without aiohttp, kubernetes-asyncio or asyncio (checked in a fresh
interpreter, since the test process itself may have imported them), and every core module must
declare an ``__all__`` naming only things it defines or re-exports.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import extender.core

CORE_MODULES = sorted(info.name for info in pkgutil.walk_packages(extender.core.__path__, prefix="extender.core."))


def test_core_imports_no_io_or_async_libraries() -> None:
    code = (
        "import sys, importlib\n"
        f"for name in {CORE_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in ('asyncio', 'aiohttp', 'kubernetes_asyncio', 'structlog') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"core pulled in: {out.stdout.strip()}"


def test_every_public_core_module_declares_all() -> None:
    for name in CORE_MODULES:
        if name.rsplit(".", 1)[-1].startswith("_") or name == "extender.core":
            continue
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        assert exported is not None, f"{name} has no __all__"
        missing = [item for item in exported if not hasattr(module, item)]
        assert not missing, f"{name}.__all__ names undefined {missing}"


LAYERS = ("extender.core", "extender.state", "extender.backends", "extender.views", "extender.server")


def _imports(module_name: str) -> set[str]:
    import ast

    spec = importlib.util.find_spec(module_name)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_imports_point_downward_only() -> None:
    """core < state < backends < views < server (DESIGN.md): a module may import its own layer and the ones below."""
    for rank, layer in enumerate(LAYERS):
        package = importlib.import_module(layer)
        names = [info.name for info in pkgutil.walk_packages(package.__path__, prefix=f"{layer}.")]
        above = LAYERS[rank + 1 :]
        for name in [layer, *names]:
            bad = sorted(i for i in _imports(name) if any(i == a or i.startswith(a + ".") for a in above))
            assert not bad, f"{name} imports from a higher layer: {bad}"


def test_state_imports_no_http_libraries() -> None:
    code = (
        "import extender.state.service, extender.state.cache.store, extender.state.cache.ledger, sys\n"
        "print(','.join(sorted(m for m in ('aiohttp', 'kubernetes_asyncio') if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"state pulled in: {out.stdout.strip()}"
