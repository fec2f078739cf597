"""The layering rules of DESIGN.md, checked mechanically.

The core must import without aiohttp, kubernetes-asyncio or asyncio (checked in a fresh
interpreter, since the test process itself may have imported them), and every core module must
declare an ``__all__`` naming only things it defines or re-exports.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import extender.core

CORE_MODULES = sorted(
    info.name for info in pkgutil.walk_packages(extender.core.__path__, prefix="extender.core.")
)


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
