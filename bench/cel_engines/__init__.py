"""The CEL engines on PyPI against the project's own (``extender.core.cel``), behind one interface.

Run from the repository root::

    python -m bench.cel_engines [--engines a,b] [--reps N] [--devices N] [--quick] [--features]
                                [--no-speed] [--json PATH]

Engines: ``celpy-interp`` and ``celpy-compiled`` (cel-python's stock runners),
``cel-expr-python`` (the CEL C++ runtime), ``common-expression-language`` (module ``cel``, the
Rust interpreter) and ``dra-extender`` (this project's package on cel-python). The two non-celpy
engines come with the ``celengines`` extra (``pip install -e '.[celengines]'``); an engine whose
packages are missing is reported as not installed and skipped.

Why a process per engine, which stand-ins each needs for Quantity and Semver, and what the
figures mean: docs/cel-engines.md. Module map:

- ``workload``: the five selectors, the deterministic devices, the feature probes;
- ``interface``: the adapter interface (compile, view, evaluate; per-slice variants);
- ``engine_*``: one adapter per engine; ``registry``: which exist and are installed;
- ``measure`` and ``timing``: what a worker measures; ``worker``: the worker process;
- ``report`` and ``cli``: the tables and the command line.

Timings are printed, never asserted (tests/test_bench_cel_engines.py checks that the tables
appear and the engines agree).
"""

__all__: list[str] = []
