"""Semantic versions (semver 2.0.0), as DRA ``version`` attributes and the CEL ``semver()`` use them.

Strict parsing follows the grammar of semver.org (and of ``github.com/blang/semver/v4``'s
``Parse``, which Kubernetes uses): ``MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]``, numeric
identifiers without leading zeros, dot-separated non-empty identifiers of ``[0-9A-Za-z-]``.
Like blang, numbers must fit in uint64.

``normalize=True`` is the Kubernetes CEL ``semver(s, true)``: a leading ``v`` is dropped,
leading zeros are removed from the three numeric parts and a missing minor or patch becomes 0
(``v1.02`` -> ``1.2.0``); the result is then parsed strictly.

Precedence (:meth:`Semver.compare`, ``<``...) follows semver.org section 11 and ignores build
metadata. Equality (``==``, ``hash``) is structural and includes build metadata, so it agrees
with comparing canonical strings (what the allocator's matchAttribute does).
"""

from __future__ import annotations

import json
from typing import Final

__all__ = ["Semver", "SemverParseError"]

_MAX_UINT64: Final = 2**64 - 1
_NUMBERS: Final = frozenset("0123456789")
_ALPHANUM: Final = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-")

#: Sort key of one prerelease identifier: numeric ones sort before alphanumeric ones.
_PreKey = tuple[int, int | str]


class SemverParseError(ValueError):
    """A version that does not parse. ``detail`` is the bare upstream (blang/semver) message,
    e.g. ``Invalid character(s) found in major number "v1"``; ``str()`` also names the text."""

    def __init__(self, text: str, detail: str) -> None:
        super().__init__(f"invalid semantic version {text!r}: {detail}")
        self.text = text
        self.detail = detail


class Semver:
    """An immutable semantic version. ``str()`` gives the canonical text."""

    __slots__ = ("_key", "build", "major", "minor", "patch", "prerelease")

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...]
    build: tuple[str, ...]
    _key: tuple[int, int, int, int, tuple[_PreKey, ...]]

    def __init__(
        self,
        major: int,
        minor: int,
        patch: int,
        prerelease: tuple[str, ...] = (),
        build: tuple[str, ...] = (),
    ) -> None:
        for name, number in (("major", major), ("minor", minor), ("patch", patch)):
            if not 0 <= number <= _MAX_UINT64:
                raise ValueError(f"{name} version {number} out of range")
        pre_key = tuple(_prerelease_key(identifier) for identifier in prerelease)
        for item in build:
            _check_build(item)
        set_ = object.__setattr__
        set_(self, "major", major)
        set_(self, "minor", minor)
        set_(self, "patch", patch)
        set_(self, "prerelease", tuple(prerelease))
        set_(self, "build", tuple(build))
        # A release sorts after all of its prereleases: flag 1 for "no prerelease".
        set_(self, "_key", (major, minor, patch, 0 if prerelease else 1, pre_key))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Semver is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Semver is immutable")

    @classmethod
    def parse(cls, text: str, *, normalize: bool = False) -> Semver:
        """Parse ``text``; :class:`SemverParseError` (a ValueError) if it is not a valid version."""
        if not isinstance(text, str):
            raise TypeError(f"version must be a string, not {type(text).__name__}")
        try:
            return _parse_strict(_normalize(text) if normalize else text)
        except _Invalid as exc:
            raise SemverParseError(text, str(exc)) from None

    # --- precedence -------------------------------------------------------------------------

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by semver precedence (build metadata ignored)."""
        a, b = self._key, other._key
        return (a > b) - (a < b)

    def __lt__(self, other: Semver) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._key < other._key

    def __le__(self, other: Semver) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._key <= other._key

    def __gt__(self, other: Semver) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._key > other._key

    def __ge__(self, other: Semver) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._key >= other._key

    # --- structural equality (build metadata included) ---------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._key == other._key and self.build == other.build

    def __hash__(self) -> int:
        return hash((self._key, self.build))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"

    def __reduce__(self) -> tuple[object, ...]:
        return (Semver, (self.major, self.minor, self.patch, self.prerelease, self.build))

    def __copy__(self) -> Semver:
        return self

    def __deepcopy__(self, memo: object) -> Semver:
        return self


# --- parsing --------------------------------------------------------------------------------


class _Invalid(ValueError):
    """Internal: carries the bare upstream message up to :meth:`Semver.parse`."""


def _go_quote(text: str) -> str:
    """Go's ``%q`` for the plain strings that appear in version texts."""
    return json.dumps(text, ensure_ascii=False)


def _parse_strict(text: str) -> Semver:
    if not text:
        raise _Invalid("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise _Invalid("No Major.Minor.Patch elements found")
    major = _number(parts[0], "Major")
    minor = _number(parts[1], "Minor")
    rest = parts[2]
    build: tuple[str, ...] = ()
    plus = rest.find("+")
    if plus != -1:
        build = tuple(rest[plus + 1 :].split("."))
        rest = rest[:plus]
    prerelease: tuple[str, ...] = ()
    dash = rest.find("-")
    if dash != -1:
        prerelease = tuple(rest[dash + 1 :].split("."))
        rest = rest[:dash]
    patch = _number(rest, "Patch")
    return Semver(major, minor, patch, prerelease, build)


def _number(text: str, what: str) -> int:
    if not _NUMBERS.issuperset(text):
        raise _Invalid(f"Invalid character(s) found in {what.lower()} number {_go_quote(text)}")
    if len(text) > 1 and text[0] == "0":
        raise _Invalid(f"{what} number must not contain leading zeroes {_go_quote(text)}")
    return _parse_uint64(text)


def _parse_uint64(text: str) -> int:
    """strconv.ParseUint(text, 10, 64) on a string of ASCII digits (possibly empty)."""
    if not text:
        raise _Invalid(f"strconv.ParseUint: parsing {_go_quote(text)}: invalid syntax")
    value = int(text)
    if value > _MAX_UINT64:
        raise _Invalid(f"strconv.ParseUint: parsing {_go_quote(text)}: value out of range")
    return value


def _prerelease_key(identifier: str) -> _PreKey:
    if not identifier:
        raise _Invalid("Prerelease is empty")
    if _NUMBERS.issuperset(identifier):
        if len(identifier) > 1 and identifier[0] == "0":
            raise _Invalid(f"Numeric PreRelease version must not contain leading zeroes {_go_quote(identifier)}")
        return (0, _parse_uint64(identifier))
    if not _ALPHANUM.issuperset(identifier):
        raise _Invalid(f"Invalid character(s) found in prerelease {_go_quote(identifier)}")
    return (1, identifier)


def _check_build(identifier: str) -> None:
    if not identifier:
        raise _Invalid("Build meta data is empty")
    if not _ALPHANUM.issuperset(identifier):
        raise _Invalid(f"Invalid character(s) found in build meta data {_go_quote(identifier)}")


def _normalize(text: str) -> str:
    """Kubernetes' normalizeAndParse: drop ``v``, strip leading zeros, fill missing parts with 0."""
    if text.startswith("v"):
        text = text[1:]
    parts = text.split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            # Keep one zero when nothing numeric is left ("00" -> "0", "00-rc" -> "0-rc").
            if not stripped or stripped[0] not in _NUMBERS:
                stripped = "0" + stripped
            parts[index] = stripped
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise _Invalid("short version cannot contain PreRelease/Build meta data")
        parts.extend("0" * (3 - len(parts)))
    return ".".join(parts)
