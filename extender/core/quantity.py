"""Kubernetes ``resource.Quantity`` (k8s.io/apimachinery/pkg/api/resource), exact and immutable.

A quantity is stored as an integer count of nano-units plus its *format family* (BinarySI,
DecimalSI, DecimalExponent). Integer nanos are exact because upstream's parser rounds every
value up (away from zero) to a multiple of 1n, and addition and subtraction keep that property;
they also make comparison and hashing plain integer operations, which matters because the
allocator compares capacities and counters in its inner loop.

Parsing follows upstream's ``ParseQuantity`` grammar, including its oddities:

- ``<sign>? <digits>* (. <digits>*)? <suffix>`` where the suffix is a decimal SI suffix
  (``n u m "" k M G T P E``), a binary one (``Ki Mi Gi Ti Pi Ei``) or an exponent (``e3``,
  ``E-3``); a bare sign or dot means zero (``"-"`` parses as 0 upstream too);
- values are rounded up to 1n (``0.1n`` is ``1n``);
- BinarySI values are capped at 2^63-1 in magnitude;
- the canonical text (``str()``) keeps the format family and, like upstream, keeps the exact
  input text when upstream's fast path does (``+1Ki`` prints as ``+1Ki``, ``1E-3`` as ``1E-3``).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

__all__ = ["BINARY_SI", "DECIMAL_EXPONENT", "DECIMAL_SI", "Quantity", "QuantityParseError"]

BINARY_SI: Final = "BinarySI"
DECIMAL_SI: Final = "DecimalSI"
DECIMAL_EXPONENT: Final = "DecimalExponent"

_NANOS_PER_UNIT: Final = 10**9
_MAX_INT64: Final = 2**63 - 1
#: Upstream caps BinarySI quantities at MaxInt64 (in units).
_BINARY_CAP_NANOS: Final = _MAX_INT64 * _NANOS_PER_UNIT
_MAX_INT32: Final = 2**31 - 1
#: Positive powers of ten beyond this are refused instead of building giant integers (upstream
#: accepts up to MaxInt32); nothing real comes anywhere near it.
_MAX_EXPONENT: Final = 10_000

_FORMAT_WRONG: Final = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"

_NUMERIC: Final = "unable to parse numeric part of quantity"

_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}  # fmt: skip
_BINARY_SUFFIXES: Final[dict[str, int]] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIX_FOR_EXPONENT: Final[dict[int, str]] = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIX_FOR_POWER: Final[tuple[str, ...]] = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")

_DIGITS: Final = frozenset("0123456789")


class QuantityParseError(ValueError):
    """A quantity that does not parse. ``detail`` is the bare upstream message (ErrFormatWrong,
    ErrSuffix, ...), as CEL's ``quantity()`` reports it; ``str()`` also names the text."""

    def __init__(self, text: str, detail: str) -> None:
        super().__init__(f"invalid quantity {text!r}: {detail}")
        self.text = text
        self.detail = detail


class Quantity:
    """An exact Kubernetes quantity. Immutable; equal and hashed by value (the format is ignored)."""

    __slots__ = ("_format", "_nanos", "_text")

    _nanos: int
    _format: str
    _text: str  # the string form, filled lazily (or the parsed text upstream would keep)

    def __init__(self, nanos: int, fmt: str = DECIMAL_SI) -> None:
        """Build from a count of nano-units; prefer :meth:`parse` and :meth:`from_int`."""
        if fmt not in (BINARY_SI, DECIMAL_SI, DECIMAL_EXPONENT):
            raise ValueError(f"unknown quantity format {fmt!r}")
        object.__setattr__(self, "_nanos", nanos)
        object.__setattr__(self, "_format", fmt)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Quantity is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Quantity is immutable")

    # --- construction -----------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse like upstream's ``ParseQuantity``; :class:`QuantityParseError` (a ValueError) if invalid."""
        if not isinstance(text, str):
            raise TypeError(f"quantity must be a string, not {type(text).__name__}")
        return _parse(text)

    @classmethod
    def from_json(cls, value: object) -> Quantity:
        """Decode a quantity from a JSON value the way upstream's ``UnmarshalJSON`` does.

        Strings are stripped of surrounding whitespace first; JSON numbers are accepted too
        (the OpenAPI type is string-or-number).
        """
        if isinstance(value, str):
            return cls.parse(value.strip())
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise QuantityParseError(repr(value), "must be a string or a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise QuantityParseError(repr(value), "not a finite number")
        return cls.parse(repr(value))

    @classmethod
    def from_int(cls, value: int) -> Quantity:
        """An integer quantity in DecimalSI, like ``resource.NewQuantity(v, DecimalSI)``."""
        return cls(value * _NANOS_PER_UNIT, DECIMAL_SI)

    @classmethod
    def from_fraction(cls, value: Fraction | int, fmt: str = DECIMAL_SI) -> Quantity:
        """A quantity from an exact number, rounded up (away from zero) to 1n as parsing does."""
        return cls(_round_nanos_away(Fraction(value) * _NANOS_PER_UNIT), fmt)

    # --- accessors --------------------------------------------------------------------------

    @property
    def format(self) -> str:
        """The format family: ``BinarySI``, ``DecimalSI`` or ``DecimalExponent``."""
        return self._format

    @property
    def nanos(self) -> int:
        """The exact value in units of 10^-9."""
        return self._nanos

    def as_fraction(self) -> Fraction:
        return Fraction(self._nanos, _NANOS_PER_UNIT)

    def value_ceil(self) -> int:
        """Upstream ``Quantity.Value()``: the integer value, non-integers rounded away from zero.

        (Older upstream releases rounded negatives toward +inf on their big-decimal path; current
        upstream rounds away from zero on both paths, and so do we. Quantities that reach the
        allocator are non-negative, where every version agrees.)
        """
        whole, rest = divmod(abs(self._nanos), _NANOS_PER_UNIT)
        if rest:
            whole += 1
        return whole if self._nanos >= 0 else -whole

    def as_int64(self) -> int | None:
        """Upstream ``AsInt64()``: the value if it is an integer that fits in int64, else None."""
        whole, rest = divmod(self._nanos, _NANOS_PER_UNIT)
        if rest or not -(2**63) <= whole <= _MAX_INT64:
            return None
        return whole

    def is_integer(self) -> bool:
        return self._nanos % _NANOS_PER_UNIT == 0

    def sign(self) -> int:
        return (self._nanos > 0) - (self._nanos < 0)

    def is_zero(self) -> bool:
        return self._nanos == 0

    def as_approximate_float(self) -> float:
        try:
            return self._nanos / _NANOS_PER_UNIT
        except OverflowError:
            return float("inf") if self._nanos > 0 else float("-inf")

    def compare(self, other: Quantity) -> int:
        """-1, 0 or 1 as ``self`` is less than, equal to or greater than ``other``."""
        a, b = self._nanos, other._nanos
        return (a > b) - (a < b)

    # --- arithmetic (the result keeps the left operand's format, unless it is zero) -------------

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return _make(self._nanos + other._nanos, other._format if self._nanos == 0 else self._format)

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return _make(self._nanos - other._nanos, other._format if self._nanos == 0 else self._format)

    def __neg__(self) -> Quantity:
        return _make(-self._nanos, self._format)

    # --- comparison and hashing by value ------------------------------------------------------
    # EAFP instead of isinstance: these run in the allocator's inner loop, and only a Quantity
    # (slotted, not subclassed) has ``_nanos``.

    def __eq__(self, other: object) -> bool:
        try:
            return self._nanos == other._nanos  # type: ignore[attr-defined, no-any-return]
        except AttributeError:
            return NotImplemented

    def __ne__(self, other: object) -> bool:
        try:
            return self._nanos != other._nanos  # type: ignore[attr-defined, no-any-return]
        except AttributeError:
            return NotImplemented

    def __lt__(self, other: Quantity) -> bool:
        try:
            return self._nanos < other._nanos
        except AttributeError:
            return NotImplemented

    def __le__(self, other: Quantity) -> bool:
        try:
            return self._nanos <= other._nanos
        except AttributeError:
            return NotImplemented

    def __gt__(self, other: Quantity) -> bool:
        try:
            return self._nanos > other._nanos
        except AttributeError:
            return NotImplemented

    def __ge__(self, other: Quantity) -> bool:
        try:
            return self._nanos >= other._nanos
        except AttributeError:
            return NotImplemented

    def __hash__(self) -> int:
        return hash(self._nanos)

    def __bool__(self) -> bool:
        return self._nanos != 0

    def exact_key(self) -> tuple[int, str, str]:
        """What tells this quantity from every other, its written form included (``==`` and
        ``hash`` ignore the form): equal only for quantities nothing can tell apart."""
        return self._nanos, self._format, str(self)

    # --- text -----------------------------------------------------------------------------------

    def __str__(self) -> str:
        try:
            return self._text
        except AttributeError:  # not computed yet
            text = _canonical(self._nanos, self._format)
            object.__setattr__(self, "_text", text)
            return text

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def __reduce__(self) -> tuple[object, ...]:
        return (Quantity, (self._nanos, self._format), None, None, None)

    def __copy__(self) -> Quantity:
        return self

    def __deepcopy__(self, memo: object) -> Quantity:
        return self


_new_object = object.__new__
_set = object.__setattr__


def _make(nanos: int, fmt: str, text: str | None = None) -> Quantity:
    """Build a Quantity without re-validating the format (internal, for arithmetic and parsing)."""
    q: Quantity = _new_object(Quantity)
    _set(q, "_nanos", nanos)
    _set(q, "_format", fmt)
    if text is not None:  # otherwise the slot stays empty until str() fills it
        _set(q, "_text", text)
    return q


# --- parsing --------------------------------------------------------------------------------


class _Invalid(ValueError):
    """Internal: carries the bare upstream message up to :func:`_parse`."""


def _parse(text: str) -> Quantity:
    if not text:
        raise QuantityParseError(text, _FORMAT_WRONG)
    if text == "0":
        return _make(0, DECIMAL_SI, text)
    try:
        negative, num, denom, suffix = _split(text)
        fmt, base, exponent = _interpret_suffix(suffix)
    except _Invalid as exc:
        raise QuantityParseError(text, str(exc)) from None
    if not num and not denom and _takes_slow_path(base, exponent) and not _has_digit(text, suffix):
        # QUIRK (upstream): a number part without digits ("-", ".") is zero on the int64 fast
        # path but fails to parse on the big-decimal path (tiny exponents, Pi and Ei).
        raise QuantityParseError(text, _NUMERIC)

    # The value is int(num + denom) * base**exponent / 10**len(denom).
    mantissa = int(num + denom) if (num or denom) else 0
    if base == 10:
        nanos = _scale10_nanos(mantissa, exponent - len(denom))
    else:
        nanos = _ceil_div((mantissa << exponent) * _NANOS_PER_UNIT, 10 ** len(denom))
        nanos = min(nanos, _BINARY_CAP_NANOS)
        if 0 < nanos < _NANOS_PER_UNIT:
            fmt = DECIMAL_SI  # upstream: a binary amount below 1 "avoids confusion" as DecimalSI
    if negative:
        nanos = -nanos
    return _make(nanos, fmt, text if _keeps_text(fmt, exponent, num, denom) else None)


def _takes_slow_path(base: int, exponent: int) -> bool:
    """Whether upstream parses a zero-digit number with inf.Dec rather than its int64 fast path."""
    return exponent < -9 if base == 10 else exponent >= 50


def _has_digit(text: str, suffix: str) -> bool:
    return any(char in _DIGITS for char in text[: len(text) - len(suffix)])


#: Upstream's scanner as a regular expression: sign, number (leading zeros apart), fraction,
#: then suffix letters, an optional sign and digits. Greedy matching splits exactly like the
#: scanner does, because a digit can only move into the suffix when nothing but digits follows.
_SHAPE: Final = re.compile(r"([+-]?)0*([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")


def _split(text: str) -> tuple[bool, str, str, str]:
    """Split into (negative, integer digits without leading zeros, fraction digits, suffix)."""
    match = _SHAPE.fullmatch(text)
    if match is None:
        raise _Invalid(_FORMAT_WRONG)
    sign, num, denom, suffix = match.groups()
    return sign == "-", num, denom or "", suffix


def _interpret_suffix(suffix: str) -> tuple[str, int, int]:
    """(format, base, exponent) of a suffix, as upstream's suffixer interprets it."""
    exponent = _DECIMAL_SUFFIXES.get(suffix)
    if exponent is not None:
        return DECIMAL_SI, 10, exponent
    exponent = _BINARY_SUFFIXES.get(suffix)
    if exponent is not None:
        return BINARY_SI, 2, exponent
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        if body and body.isdigit() and body.isascii():
            value = int(digits)
            if abs(value) > _MAX_INT32:  # upstream rejects what its int32 scale cannot hold
                return _bad_suffix()
            if value > _MAX_EXPONENT:
                raise _Invalid(f"exponent {value} is larger than {_MAX_EXPONENT}, which is not supported")
            return DECIMAL_EXPONENT, 10, value
    return _bad_suffix()


def _bad_suffix() -> tuple[str, int, int]:
    raise _Invalid("unable to parse quantity's suffix")


def _scale10_nanos(mantissa: int, scale: int) -> int:
    """``mantissa * 10**scale`` in nanos, rounded up to a whole nano without huge powers."""
    shift = scale + 9
    if shift >= 0:
        factor: int = 10**shift
        return mantissa * factor
    if mantissa == 0:
        return 0
    if -shift > len(str(mantissa)):  # far below 1n: rounds up to exactly 1n
        return 1
    divisor: int = 10**-shift
    whole, rest = divmod(mantissa, divisor)
    return whole + 1 if rest else whole


def _ceil_div(numerator: int, denominator: int) -> int:
    """Ceiling of a non-negative ratio."""
    return -(-numerator // denominator)


def _round_nanos_away(nanos: Fraction) -> int:
    """Round a non-negative or negative nano count away from zero (upstream's inf.RoundUp)."""
    magnitude = -((-abs(nanos.numerator)) // nanos.denominator)
    return magnitude if nanos >= 0 else -magnitude


def _keeps_text(fmt: str, exponent: int, num: str, denom: str) -> bool:
    """Whether upstream's fast path keeps the input text as the quantity's string form.

    Upstream remembers the text when the parsed value already looks canonical; the remembered
    text may still carry a sign or leading zeros (``+1``, ``01Ki``), which ``String()`` shows.
    """
    shifted = (num or "0") + denom
    if fmt == BINARY_SI:
        precision = 15 - len(num or "0") - (exponent * 3 // 10) - 1
        return precision >= 0 and not denom and int(shifted) & 0x07 != 0
    scale = exponent - len(denom)
    precision = 18 - len(num or "0") - len(denom)
    return precision >= 0 and scale >= -9 and scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"


# --- formatting -----------------------------------------------------------------------------


def _canonical(nanos: int, fmt: str) -> str:
    """Upstream ``CanonicalizeBytes``: largest suffix that shows the value exactly."""
    if nanos == 0:
        return "0"
    if fmt == BINARY_SI and abs(nanos) >= 1024 * _NANOS_PER_UNIT and nanos % _NANOS_PER_UNIT == 0:
        text = _canonical_binary(nanos // _NANOS_PER_UNIT)
        if text is not None:
            return text
        # Grown past Ei by arithmetic: no binary suffix fits, show the exact decimal value.
        return _canonical_decimal(nanos, DECIMAL_EXPONENT)
    # BinarySI below 1024 or with a fraction is shown as DecimalSI (upstream: "don't lose precision").
    return _canonical_decimal(nanos, DECIMAL_EXPONENT if fmt == DECIMAL_EXPONENT else DECIMAL_SI)


def _canonical_binary(units: int) -> str | None:
    magnitude = abs(units)
    power = 0
    while magnitude >= 1024 and magnitude % 1024 == 0:
        magnitude //= 1024
        power += 1
    if power >= len(_BINARY_SUFFIX_FOR_POWER):
        return None
    sign = "-" if units < 0 else ""
    return f"{sign}{magnitude}{_BINARY_SUFFIX_FOR_POWER[power]}"


def _canonical_decimal(nanos: int, fmt: str) -> str:
    magnitude = abs(nanos)
    exponent = -9
    while magnitude % 10 == 0:
        magnitude //= 10
        exponent += 1
    # Bring the exponent down to a multiple of three (Python's % is never negative here).
    rest = exponent % 3
    if rest:
        magnitude *= 10**rest
        exponent -= rest
    sign = "-" if nanos < 0 else ""
    suffix = _DECIMAL_SUFFIX_FOR_EXPONENT.get(exponent) if fmt == DECIMAL_SI else None
    if suffix is None:
        # DecimalExponent, or DecimalSI beyond E (newer upstream falls back to exponent notation
        # there instead of dropping the magnitude).
        suffix = f"e{exponent}" if exponent else ""
    return f"{sign}{magnitude}{suffix}"
