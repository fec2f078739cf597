"""Reading Kubernetes manifests from files: YAML or JSON, multi-document, ``kind: List``, directories.

This is I/O, so it lives outside the core; the core only ever sees the decoded model.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ManifestError", "iter_manifest_files", "load_manifests"]

_SUFFIXES = (".yaml", ".yml", ".json")


class ManifestError(Exception):
    """A manifest file cannot be read or parsed."""


def iter_manifest_files(path: Path) -> Iterator[Path]:
    """The file itself, or every YAML/JSON file under a directory, in name order."""
    if path.is_dir():
        for child in sorted(path.rglob("*")):
            if child.is_file() and child.suffix in _SUFFIXES:
                yield child
    elif path.is_file():
        yield path
    else:
        raise ManifestError(f"{path}: no such file or directory")


def _flatten(document: Any, source: str) -> Iterator[dict[str, Any]]:
    if document is None:
        return
    if not isinstance(document, dict):
        raise ManifestError(f"{source}: expected a Kubernetes object (a mapping), got {type(document).__name__}")
    if document.get("kind") == "List" or (document.get("kind", "").endswith("List") and "items" in document):
        for item in document.get("items") or []:
            yield from _flatten(item, source)
        return
    yield document


def load_manifests(*paths: Path | str) -> list[dict[str, Any]]:
    """Every object in the given files/directories, in order."""
    objects: list[dict[str, Any]] = []
    for raw_path in paths:
        for file in iter_manifest_files(Path(raw_path)):
            try:
                text = file.read_text(encoding="utf-8")
                documents = list(yaml.safe_load_all(text))
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                raise ManifestError(f"{file}: {exc}") from exc
            for document in documents:
                objects.extend(_flatten(document, str(file)))
    return objects
