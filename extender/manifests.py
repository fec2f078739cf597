"""Reading Kubernetes manifests from files: YAML or JSON, multi-document, ``kind: List``, directories.

This is I/O, so it lives outside the core; the core only ever sees the decoded model.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
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


#: libyaml's loader when PyYAML was built with it (about 10x faster than the pure-Python one).
_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse(file: Path) -> list[Any]:
    """The documents of one file: JSON through orjson, YAML (multi-document) through libyaml."""
    data = file.read_bytes()
    if file.suffix == ".json":
        try:
            return [orjson.loads(data)]
        except orjson.JSONDecodeError:
            pass  # JSON Lines or a JSON-ish YAML file: let the YAML parser try
    return list(yaml.load_all(data.decode("utf-8"), Loader=_YamlLoader))


def load_manifests(*paths: Path | str) -> list[dict[str, Any]]:
    """Every object in the given files/directories, in order."""
    objects: list[dict[str, Any]] = []
    for raw_path in paths:
        for file in iter_manifest_files(Path(raw_path)):
            try:
                documents = _parse(file)
            except (OSError, UnicodeDecodeError, yaml.YAMLError, orjson.JSONDecodeError) as exc:
                raise ManifestError(f"{file}: {exc}") from exc
            for document in documents:
                objects.extend(_flatten(document, str(file)))
    return objects
