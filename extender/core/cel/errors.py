"""The errors of the CEL package: a selector that does not compile, an evaluation that failed on
one device, and an installed celpy this package does not recognise."""

from __future__ import annotations

__all__ = ["CelCompileError", "CelEngineError", "CelRuntimeError"]


class CelCompileError(Exception):
    """The expression does not compile; ``message`` is the bare cel-style text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CelRuntimeError(Exception):
    """Evaluating the expression on one device failed; ``message`` is the bare text
    (e.g. ``no such key: model``). Returned as a value by ``SelectorCache.results``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CelEngineError(ImportError):
    """The installed cel-python generates code or parse trees this package does not recognise.

    Raised when the package is imported (the canary in ``celpy_glue``), so that a celpy release
    that changed its internals stops the process with a clear message instead of silently
    mis-evaluating selectors.
    """
