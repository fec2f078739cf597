"""CEL device selectors: compile once, evaluate per device, cache results per slice.

The package, one concern per module (docs/architecture.md has the map):

- ``cache``: ``SelectorCache``, the entry point (compiled programs, per-slice results);
- ``compiler``: one expression to a program (``compile_program``); ``syntax``, ``checks`` and
  ``tree`` are its parts (optional syntax and error texts, cel-go's static checks, reading the
  parse tree);
- ``programs`` and ``view``: what a program runs on (the ``device`` view, per-slice state);
- ``environment``: the variable, functions, namespaces and type names a selector may use, from
  the library modules ``operators``, ``lib_kubernetes``, ``lib_strings``, ``lib_lists``,
  ``lib_optional``, ``macros`` and their shared ``values``;
- ``cost``: the cost model and meter;
- ``celpy_glue``: every contact with cel-python's internals, checked at import;
- ``errors`` and ``stats``.

Engine. Expressions are parsed by celpy's grammar and translated to Python by celpy's
transpiler; the generated statements become one Python function per expression, which takes
the device scope as its argument. Compared with celpy's ``CompiledRunner.evaluate`` this avoids
re-executing module code and cloning an ``Activation`` per evaluation, and keeps nothing in
module globals, so programs are re-entrant. Only the cost meter is shared: evaluate on one
thread at a time. docs/cel-engines.md compares the CEL engines on PyPI behind this interface.
"""

from __future__ import annotations

from extender.core.cel.cache import DEFAULT_PROGRAM_CACHE_SIZE, SelectorCache
from extender.core.cel.compiler import MAX_EXPRESSION_LENGTH, compile_program
from extender.core.cel.errors import CelCompileError, CelEngineError, CelRuntimeError
from extender.core.cel.stats import SelectorStats

__all__ = [
    "DEFAULT_PROGRAM_CACHE_SIZE",
    "MAX_EXPRESSION_LENGTH",
    "CelCompileError",
    "CelEngineError",
    "CelRuntimeError",
    "SelectorCache",
    "SelectorStats",
    "compile_program",
]
