"""The engines this benchmark knows, whether each is installed, and their versions.

The parent process decides from package metadata and import specs only, without importing an
engine: each engine is imported in its own worker process (see ``worker``).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from importlib import metadata

from bench.cel_engines.interface import Engine

__all__ = ["ENGINES", "EngineInfo", "load"]


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """Where an adapter lives and what it needs installed."""

    name: str
    #: "module:Class" of the adapter
    adapter: str
    #: distributions whose versions the header shows; all must be installed
    distributions: tuple[str, ...]
    #: modules that must be importable (a distribution can be present but broken)
    modules: tuple[str, ...]
    #: the pip command that installs what is missing
    install_hint: str

    def missing(self) -> list[str]:
        """The distributions that are not installed, else the modules that cannot be found;
        empty if the engine can run."""
        absent = [dist for dist in self.distributions if _version(dist) is None]
        return absent or [module for module in self.modules if not _importable(module)]

    def versions(self) -> str:
        """``cel-python 0.5.0`` (several distributions joined by ", ")."""
        return ", ".join(f"{dist} {_version(dist) or 'absent'}" for dist in self.distributions)


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken spec
        return False


_CELENGINES = "pip install -e '.[celengines]'"

ENGINES: dict[str, EngineInfo] = {
    info.name: info
    for info in (
        EngineInfo(
            "celpy-interp",
            "bench.cel_engines.engine_celpy:CelpyInterpreted",
            ("cel-python",),
            ("celpy",),
            "pip install cel-python",
        ),
        EngineInfo(
            "celpy-compiled",
            "bench.cel_engines.engine_celpy:CelpyCompiled",
            ("cel-python",),
            ("celpy",),
            "pip install cel-python",
        ),
        EngineInfo(
            "cel-expr-python",
            "bench.cel_engines.engine_cel_expr_python:CelExprPython",
            ("cel-expr-python", "protobuf"),
            ("cel_expr_python", "google.protobuf"),
            _CELENGINES,
        ),
        EngineInfo(
            "common-expression-language",
            "bench.cel_engines.engine_common_el:CommonExpressionLanguage",
            ("common-expression-language",),
            ("cel",),
            _CELENGINES,
        ),
        EngineInfo(
            "dra-extender",
            "bench.cel_engines.engine_dra_extender:DraExtender",
            ("dra-extender", "cel-python"),
            ("extender.core.cel",),
            "pip install -e .",
        ),
    )
}


def load(name: str) -> Engine:
    """Import the adapter of ``name`` and build its engine (in a worker process)."""
    module_name, _, class_name = ENGINES[name].adapter.partition(":")
    engine_class: type[Engine] = getattr(importlib.import_module(module_name), class_name)
    return engine_class()
