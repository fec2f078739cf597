"""Benchmark scripts: ``python -m bench.<name>``; each prints a header line and a Markdown table.

They build their inputs with ``tests/builders.py`` and never assert timings (see STYLE.md).
"""

__all__: list[str] = []
