"""Where the control plane's binaries are: envtest's convention, ``KUBEBUILDER_ASSETS``.

``KUBEBUILDER_ASSETS`` names a folder holding ``etcd`` and ``kube-apiserver`` (controller-runtime's
envtest), to which this project adds ``kube-controller-manager`` and ``kube-scheduler``. Nothing is
downloaded: a user who has them points the variable at them; CI unpacks the xz-compressed binaries it
is given (``python -m tests.controlplane.assets unpack SRC DEST``, checked against ``SHA256SUMS``).
Where they are missing, ``find_assets`` says why in one line, which the end-to-end tier prints as its
skip reason.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BINARIES", "ENV", "Assets", "AssetsMissing", "assets_or_skip", "find_assets", "unpack"]

ENV = "KUBEBUILDER_ASSETS"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


class AssetsMissing(Exception):
    """The binaries are not where ``KUBEBUILDER_ASSETS`` says (or it is unset)."""


@dataclass(frozen=True)
class Assets:
    folder: Path

    def binary(self, name: str) -> Path:
        return self.folder / name


def find_assets(environ: dict[str, str] | None = None) -> Assets:
    """The folder ``KUBEBUILDER_ASSETS`` names, with every binary executable there."""
    environ = dict(os.environ) if environ is None else environ
    value = environ.get(ENV, "")
    if not value:
        raise AssetsMissing(
            f"{ENV} is not set: point it at a folder holding {', '.join(BINARIES)} (v1.36; "
            "see docs/testing.md) to run the end-to-end tier"
        )
    folder = Path(value)
    missing = [name for name in BINARIES if not os.access(folder / name, os.X_OK)]
    if missing:
        raise AssetsMissing(f"{ENV}={folder} lacks executable {', '.join(missing)}")
    return Assets(folder)


def assets_or_skip(what: str) -> Assets:
    """``find_assets()``, or skip the calling test (or fixture) with ``what`` and the reason, printed
    by ``pytest -rs``: the tiers that need the binaries say why they did not run."""
    try:
        return find_assets()
    except AssetsMissing as exc:
        import pytest  # only tests call this; the unpacking CLI does not need pytest

        pytest.skip(f"{what}: {exc}")


def _sums(source: Path) -> dict[str, str]:
    sums: dict[str, str] = {}
    listing = source / "SHA256SUMS"
    if listing.exists():
        for line in listing.read_text(encoding="utf-8").splitlines():
            digest, _, name = line.strip().partition("  ")
            if digest and name:
                sums[name.strip()] = digest
    return sums


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


def unpack(source: Path, dest: Path) -> Assets:
    """Each ``<name>.xz`` (or plain ``<name>``) of ``source`` into ``dest``, executable, checked
    against ``source/SHA256SUMS`` when it lists the name; a binary already there with the right
    digest is kept (a cache)."""
    dest.mkdir(parents=True, exist_ok=True)
    sums = _sums(source)
    for name in BINARIES:
        target = dest / name
        expected = sums.get(name)
        if target.exists() and (expected is None or _digest(target) == expected):
            continue
        packed, plain = source / f"{name}.xz", source / name
        partial = dest / f".{name}.partial"
        if packed.exists():
            with lzma.open(packed) as src, partial.open("wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        elif plain.exists():
            shutil.copyfile(plain, partial)
        else:
            raise AssetsMissing(f"{source} has neither {name}.xz nor {name}")
        if expected is not None and _digest(partial) != expected:
            partial.unlink()
            raise AssetsMissing(f"{name} unpacked from {source} does not match its SHA256SUMS line")
        partial.chmod(0o755)
        partial.replace(target)
    return Assets(dest)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "unpack":
        print("usage: python -m tests.controlplane.assets unpack SOURCE DEST", file=sys.stderr)
        return 2
    try:
        assets = unpack(Path(argv[1]), Path(argv[2]))
    except (AssetsMissing, OSError, lzma.LZMAError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(assets.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
