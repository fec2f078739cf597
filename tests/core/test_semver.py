"""Tests for ``extender.core.semver``: strict semver 2.0.0 parsing (blang/semver's Parse, which
Kubernetes uses for DRA ``version`` attributes and CEL ``semver()``), the ``normalize=True`` mode of
CEL ``semver(s, true)``, precedence (semver.org section 11) and structural equality.

The CEL functions built on top (``isSemver``, ``compareTo``...) are tested with the CEL library.
"""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.core.semver import Semver, SemverParseError

MAX_UINT64 = 2**64 - 1

# --- strict parsing ---------------------------------------------------------------------------------

VALID = [
    ("0.0.4", (0, 0, 4, (), ())),
    ("1.2.3", (1, 2, 3, (), ())),
    ("10.20.30", (10, 20, 30, (), ())),
    ("1.1.2-prerelease+meta", (1, 1, 2, ("prerelease",), ("meta",))),
    ("1.1.2+meta", (1, 1, 2, (), ("meta",))),
    ("1.1.2+meta-valid", (1, 1, 2, (), ("meta-valid",))),
    ("1.0.0-alpha", (1, 0, 0, ("alpha",), ())),
    ("1.0.0-beta", (1, 0, 0, ("beta",), ())),
    ("1.0.0-alpha.beta", (1, 0, 0, ("alpha", "beta"), ())),
    ("1.0.0-alpha.beta.1", (1, 0, 0, ("alpha", "beta", "1"), ())),
    ("1.0.0-alpha.1", (1, 0, 0, ("alpha", "1"), ())),
    ("1.0.0-alpha0.valid", (1, 0, 0, ("alpha0", "valid"), ())),
    ("1.0.0-alpha.0valid", (1, 0, 0, ("alpha", "0valid"), ())),
    ("1.0.0-alpha-a.b-c-somethinglong+build.1-aef.1-its-okay", (1, 0, 0, ("alpha-a", "b-c-somethinglong"),
                                                               ("build", "1-aef", "1-its-okay"))),
    ("1.0.0-rc.1+build.1", (1, 0, 0, ("rc", "1"), ("build", "1"))),
    ("2.0.0-rc.1+build.123", (2, 0, 0, ("rc", "1"), ("build", "123"))),
    ("1.2.3-beta", (1, 2, 3, ("beta",), ())),
    ("10.2.3-DEV-SNAPSHOT", (10, 2, 3, ("DEV-SNAPSHOT",), ())),
    ("1.2.3-SNAPSHOT-123", (1, 2, 3, ("SNAPSHOT-123",), ())),
    ("2.0.0+build.1848", (2, 0, 0, (), ("build", "1848"))),
    ("2.0.1-alpha.1227", (2, 0, 1, ("alpha", "1227"), ())),
    ("1.0.0-0A.is.legal", (1, 0, 0, ("0A", "is", "legal"), ())),
    ("1.0.0+0.build.1-rc.10000aaa-kk-0.1", (1, 0, 0, (), ("0", "build", "1-rc", "10000aaa-kk-0", "1"))),
    ("1.0.0-0", (1, 0, 0, ("0",), ())),
    ("1.0.0+001", (1, 0, 0, (), ("001",))),  # build identifiers may have leading zeros
    ("1.0.0--", (1, 0, 0, ("-",), ())),
    ("1.0.0-x-y-z.--", (1, 0, 0, ("x-y-z", "--"), ())),
    ("18446744073709551615.0.0", (MAX_UINT64, 0, 0, (), ())),
    ("1.0.0-18446744073709551615", (1, 0, 0, ("18446744073709551615",), ())),
]  # fmt: skip


@pytest.mark.parametrize(("text", "parts"), VALID, ids=[c[0] for c in VALID])
def test_strict_parse(text: str, parts: tuple[object, ...]) -> None:
    v = Semver.parse(text)
    assert (v.major, v.minor, v.patch, v.prerelease, v.build) == parts
    assert str(v) == text  # strict texts are already canonical


INVALID = [
    ("", "Version string empty"),
    ("1", "No Major.Minor.Patch elements found"),
    ("1.2", "No Major.Minor.Patch elements found"),
    ("v1.2.3", 'Invalid character(s) found in major number "v1"'),
    ("V1.2.3", 'Invalid character(s) found in major number "V1"'),
    (" 1.2.3", 'Invalid character(s) found in major number " 1"'),
    ("1.2.3 ", 'Invalid character(s) found in patch number "3 "'),
    ("01.1.1", 'Major number must not contain leading zeroes "01"'),
    ("1.01.1", 'Minor number must not contain leading zeroes "01"'),
    ("1.1.01", 'Patch number must not contain leading zeroes "01"'),
    ("1..3", 'strconv.ParseUint: parsing "": invalid syntax'),
    (".2.3", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("1.2.", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("1.2.3.4", 'Invalid character(s) found in patch number "3.4"'),
    ("1.2-SNAPSHOT", "No Major.Minor.Patch elements found"),
    ("1.2-3.4", 'Invalid character(s) found in minor number "2-3"'),
    ("1.2.31.2.3----RC-SNAPSHOT.12.09.1--..12+788", 'Invalid character(s) found in patch number "31.2.3"'),
    ("-1.0.3-gamma+b7718", 'Invalid character(s) found in major number "-1"'),
    ("+invalid", "No Major.Minor.Patch elements found"),
    ("1.2.3-", "Prerelease is empty"),
    ("1.2.3-a..b", "Prerelease is empty"),
    ("1.2.3-0123", 'Numeric PreRelease version must not contain leading zeroes "0123"'),
    ("1.2.3-0123.0123", 'Numeric PreRelease version must not contain leading zeroes "0123"'),
    ("1.0.0-alpha_beta", 'Invalid character(s) found in prerelease "alpha_beta"'),
    ("1.0.0-alpha+beta+gamma", 'Invalid character(s) found in build meta data "beta+gamma"'),
    ("1.2.3+", "Build meta data is empty"),
    ("1.2.3+a..b", "Build meta data is empty"),
    ("1.2.3+ä", 'Invalid character(s) found in build meta data "ä"'),
    ("1.2.3-é", 'Invalid character(s) found in prerelease "é"'),
    ("\u0661.2.3", 'Invalid character(s) found in major number "\u0661"'),  # ARABIC-INDIC DIGIT ONE
    ("18446744073709551616.0.0", 'strconv.ParseUint: parsing "18446744073709551616": value out of range'),
    ("1.0.0-18446744073709551616", 'strconv.ParseUint: parsing "18446744073709551616": value out of range'),
]


@pytest.mark.parametrize(("text", "detail"), INVALID, ids=[repr(c[0]) for c in INVALID])
def test_strict_parse_rejects_with_blang_message(text: str, detail: str) -> None:
    with pytest.raises(SemverParseError) as info:
        Semver.parse(text)
    assert info.value.detail == detail
    assert repr(text) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        Semver.parse(1)  # type: ignore[arg-type]


# --- normalize=True (CEL semver(s, true)) ------------------------------------------------------------

NORMALIZED = [
    ("v1.2.3", "1.2.3"),
    ("1.2", "1.2.0"),
    ("v1", "1.0.0"),
    ("1", "1.0.0"),
    ("01.02.03", "1.2.3"),
    ("v01.2", "1.2.0"),
    ("00.00.00", "0.0.0"),
    ("1.0.00-rc.1", "1.0.0-rc.1"),
    ("1.0.0-rc.1+build", "1.0.0-rc.1+build"),
    ("1.2.03+meta", "1.2.3+meta"),
    ("1.0.00-rc", "1.0.0-rc"),
    ("1.0.-rc", "1.0.0-rc"),  # upstream quirk: "-rc" gets a leading "0" like a zero-stripped number
    ("1..3", None),  # an empty part stays empty and fails
    ("1.2.3", "1.2.3"),
]


@pytest.mark.parametrize(("text", "expected"), NORMALIZED, ids=[c[0] for c in NORMALIZED])
def test_normalize(text: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(SemverParseError):
            Semver.parse(text, normalize=True)
        return
    assert str(Semver.parse(text, normalize=True)) == expected


NORMALIZE_INVALID = [
    ("1.2-rc", "short version cannot contain PreRelease/Build meta data"),
    ("1+build", "short version cannot contain PreRelease/Build meta data"),
    ("", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("v", 'strconv.ParseUint: parsing "": invalid syntax'),
    # Only a lowercase v is dropped, and no whitespace is trimmed. A part that does not start with
    # a digit gets a "0" prepended before the strict parse (upstream's zero stripping), which
    # shows in the message.
    ("V1.2.3", 'Invalid character(s) found in major number "0V1"'),
    ("vv1.2.3", 'Invalid character(s) found in major number "0v1"'),
    (" 1.2.3", 'Invalid character(s) found in major number "0 1"'),
    ("1.2.3-01", 'Numeric PreRelease version must not contain leading zeroes "01"'),
]


@pytest.mark.parametrize(("text", "detail"), NORMALIZE_INVALID, ids=[repr(c[0]) for c in NORMALIZE_INVALID])
def test_normalize_still_rejects(text: str, detail: str) -> None:
    with pytest.raises(SemverParseError) as info:
        Semver.parse(text, normalize=True)
    assert info.value.detail == detail
    assert repr(text) in str(info.value)  # names the text as written, not the normalized one


# --- precedence --------------------------------------------------------------------------------------

# semver.org section 11 examples, lowest first.
ASCENDING = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.1-0",
    "1.0.1",
    "1.1.0",
    "1.9.0",
    "1.10.0",
    "1.11.0",
    "2.0.0",
    "2.1.0",
    "2.1.1",
    "10.0.0",
]


@pytest.mark.parametrize("index", range(len(ASCENDING) - 1), ids=ASCENDING[:-1])
def test_precedence_of_neighbours(index: int) -> None:
    low, high = Semver.parse(ASCENDING[index]), Semver.parse(ASCENDING[index + 1])
    assert low < high and low <= high and high > low and high >= low
    assert low.compare(high) == -1 and high.compare(low) == 1
    assert low != high


def test_sorting_follows_precedence() -> None:
    shuffled = [Semver.parse(t) for t in reversed(ASCENDING)]
    assert [str(v) for v in sorted(shuffled)] == ASCENDING


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("1.0.0-1", "1.0.0-a"),  # numeric identifiers sort before alphanumeric ones
        ("1.0.0-2", "1.0.0-10"),  # numerically, not lexically
        ("1.0.0-Z", "1.0.0-a"),  # ASCII order for alphanumerics
        ("1.0.0-a", "1.0.0-a.0"),  # a longer prerelease wins when the prefix is equal
        ("1.0.0-a", "1.0.0-a-"),
        ("1.0.0-a.b", "1.0.0-a-"),
        ("1.0.0-9", "1.0.0-1a"),
        ("0.0.0", "18446744073709551615.0.0"),
    ],
)
def test_prerelease_precedence_rules(low: str, high: str) -> None:
    assert Semver.parse(low) < Semver.parse(high)
    assert Semver.parse(high).compare(Semver.parse(low)) == 1


def test_build_metadata_is_ignored_for_precedence_but_not_for_equality() -> None:
    a, b, plain = Semver.parse("1.0.0+a"), Semver.parse("1.0.0+b"), Semver.parse("1.0.0")
    assert a.compare(b) == 0 and a.compare(plain) == 0
    assert a <= b and a >= b and not a < b and not a > b
    # Equality is structural (what matchAttribute's string comparison sees).
    assert a != b and a != plain
    assert a == Semver.parse("1.0.0+a")
    assert hash(a) == hash(Semver.parse("1.0.0+a"))
    assert len({a, b, plain, Semver.parse("1.0.0+a")}) == 3


def test_equal_versions_are_equal_and_hash_alike() -> None:
    assert Semver.parse("1.2.3-rc.1") == Semver.parse("1.2.3-rc.1")
    assert hash(Semver.parse("1.2.3-rc.1")) == hash(Semver.parse("1.2.3-rc.1"))
    assert Semver.parse("v1.2", normalize=True) == Semver.parse("1.2.0")


def test_comparison_with_other_types_is_not_supported() -> None:
    v = Semver.parse("1.0.0")
    assert (v == "1.0.0") is False
    with pytest.raises(TypeError):
        _ = v < "2.0.0"  # type: ignore[operator]


# --- construction, immutability, copying -------------------------------------------------------------


def test_constructor_validates_its_parts() -> None:
    assert str(Semver(1, 2, 3, ("rc", "1"), ("b",))) == "1.2.3-rc.1+b"
    with pytest.raises(ValueError):
        Semver(-1, 0, 0)
    with pytest.raises(ValueError):
        Semver(1, 0, 0, ("01",))
    with pytest.raises(ValueError):
        Semver(1, 0, 0, (), ("",))


def test_semver_is_immutable_and_slotted() -> None:
    v = Semver.parse("1.2.3")
    with pytest.raises(AttributeError):
        v.major = 2
    with pytest.raises(AttributeError):
        del v.minor
    assert not hasattr(v, "__dict__")


def test_copy_pickle_and_repr() -> None:
    v = Semver.parse("1.2.3-rc.1+build.5")
    assert copy.copy(v) is v and copy.deepcopy(v) is v
    again = pickle.loads(pickle.dumps(v))
    assert again == v and str(again) == "1.2.3-rc.1+build.5"
    assert repr(v) == "Semver('1.2.3-rc.1+build.5')"


# --- properties -----------------------------------------------------------------------------------------

numbers = st.integers(min_value=0, max_value=MAX_UINT64)
alnum_id = st.from_regex(r"[0-9A-Za-z-]*[A-Za-z-][0-9A-Za-z-]*", fullmatch=True)
numeric_id = st.integers(min_value=0, max_value=10**6).map(str)
identifiers = st.lists(st.one_of(alnum_id, numeric_id), max_size=4).map(tuple)
builds = st.lists(st.from_regex(r"[0-9A-Za-z-]+", fullmatch=True), max_size=3).map(tuple)
versions = st.builds(Semver, numbers, numbers, numbers, identifiers, builds)


@given(versions)
def test_canonical_text_round_trips(v: Semver) -> None:
    again = Semver.parse(str(v))
    assert again == v and hash(again) == hash(v)
    assert Semver.parse(str(v), normalize=True) == v


@given(versions, versions)
def test_compare_is_antisymmetric_and_agrees_with_operators(a: Semver, b: Semver) -> None:
    c = a.compare(b)
    assert b.compare(a) == -c
    assert (a < b) is (c < 0)
    assert (a > b) is (c > 0)
    assert (a <= b) is (c <= 0)
    if a == b:
        assert c == 0


@given(versions, versions, versions)
def test_compare_is_transitive(a: Semver, b: Semver, c: Semver) -> None:
    if a <= b and b <= c:
        assert a <= c
