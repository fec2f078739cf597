"""The contact with cel-python's internals (extender/core/cel/celpy_glue.py) and its canary.

A celpy release that changes its generated code or its grammar must stop the package from
loading with a message naming the installed and the tested versions, never mis-evaluate a
selector. The faults are injected: each rewrite made to match nothing, a grammar rule missing,
a helper that computes the wrong answer, and (in a fresh interpreter) celpy's transpiler itself
producing different code.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

from extender.core.cel import CelEngineError, celpy_glue, compile_program, operators, tree
from extender.core.cel.compiler import make_generator
from extender.core.cel.programs import Compiled
from extender.core.cel.values import FALSE

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "extender" / "core" / "cel"


def test_the_installed_celpy_passes_the_canary() -> None:
    assert celpy_glue.CELPY_VERSION in celpy_glue.TESTED_CELPY_VERSIONS
    generator = make_generator()
    assert generator.globals["_lazy_and"] is operators.lazy_and


def test_the_canary_runs_from_an_empty_meter_and_leaves_it_as_it_was() -> None:
    """An evaluation that ran out of its budget leaves the meter over the limit; the canary (run
    whenever a generator is made: at import, and by tests) must not inherit that (it failed
    whenever such a test ran first, in the suite's random order)."""
    from extender.core.cel.cost import COST

    spent = COST.spent
    COST.spent = COST.limit + 1
    try:
        make_generator()
        assert COST.spent == COST.limit + 1
    finally:
        COST.spent = spent


@pytest.mark.parametrize(
    ("attribute", "rewrite"),
    [
        ("_MACRO_CALL", "macro"),
        ("_HAS_LINE", "has"),
        ("_EAGER_LOGIC", "and"),
        ("_EAGER_CONDITION", "condition"),
        ("_RESULT_CALL", "result"),
        ("_LIBRARY_CALL", "library"),
    ],
)
def test_a_rewrite_that_no_longer_matches_stops_the_engine(
    monkeypatch: pytest.MonkeyPatch, attribute: str, rewrite: str
) -> None:
    original: re.Pattern[str] = getattr(celpy_glue, attribute)
    # Same groups, never matches: what a celpy that renamed the generated form would look like.
    monkeypatch.setattr(celpy_glue, attribute, re.compile(original.pattern + "(?!)", original.flags))
    with pytest.raises(CelEngineError) as caught:
        make_generator()
    message = str(caught.value)
    assert f"cel-python {celpy_glue.CELPY_VERSION}" in message
    assert f"'{rewrite}'" in message
    assert "pip install 'cel-python==" in message


def test_a_grammar_without_a_rule_we_read_stops_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(celpy_glue, "RULES_USED", tree.RULES_USED | {"member_dot_optional"})
    with pytest.raises(CelEngineError, match=r"grammar lacks the rules \['member_dot_optional'\]"):
        make_generator()


def test_a_canary_that_evaluates_wrong_stops_the_engine() -> None:
    with pytest.raises(CelEngineError, match=r"evaluated to .*not true"):
        make_generator(lazy_and=lambda scope, left, right: FALSE)


def test_changed_generated_code_fails_the_import_with_the_versions() -> None:
    """A celpy whose transpiler writes ``logical_and`` differently: ``import extender.core.cel``
    fails, in a fresh interpreter, before any selector is compiled."""
    code = (
        "import celpy.evaluation as e\n"
        "original = e.Phase2Transpiler.statements\n"
        "def statements(self, tree):\n"
        "    return [s.replace('logical_and(', 'logical_and_v2(') for s in original(self, tree)]\n"
        "e.Phase2Transpiler.statements = statements\n"
        "try:\n"
        "    import extender.core.cel\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.startswith("CelEngineError cel-python "), out.stdout + out.stderr
    assert "the rewrites ['and'] no longer match" in out.stdout
    assert "tested with cel-python" in out.stdout


def test_every_grammar_rule_the_walkers_name_is_declared() -> None:
    """A string literal in the package that names a rule of celpy's grammar is a walker reading
    the tree: it must be in tree.RULES_USED, which the canary checks against the grammar."""
    rules = celpy_glue.grammar_rules()
    named: set[str] = set()
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in rules:
                named.add(node.value)
    # Rules only built, never read (the cel.bind rewrite builds these nodes).
    built_only = {"primary", "paren_expr", "member"} - tree.RULES_USED
    assert named - built_only <= tree.RULES_USED, sorted(named - built_only - tree.RULES_USED)
    assert rules >= tree.RULES_USED


def test_pyproject_pins_cel_python_to_the_tested_versions() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in dependencies if d.startswith("cel-python")]
    assert pin.startswith("cel-python==")
    assert pin.removeprefix("cel-python==") in celpy_glue.TESTED_CELPY_VERSIONS
    declared = {re.split(r"[<>=!~;\s]", d, maxsplit=1)[0] for d in dependencies}
    # Imported by the package directly, so declared, not left to celpy's own requirements.
    assert {"lark", "google-re2"} <= declared


def test_programs_use_our_library_through_short_globals() -> None:
    """Library calls are rewritten to the program's own globals: evaluating a selector with
    library functions does not go through module attribute lookups on ``extender``."""
    program = compile_program('device.driver.lowerAscii().startsWith("gpu") && quantity("1Gi").isInteger()')
    assert isinstance(program, Compiled)
    names: set[str] = set()
    pending = [program.function.__code__]
    while pending:
        code = pending.pop()
        names.update(code.co_names)
        pending.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    assert "extender" not in names
    assert {"_L_lowerAscii", "_L_isInteger", "_lazy_and"} <= names


def test_a_form_left_after_rewriting_stops_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    # ``_lazy_and(`` is in every correctly rewritten canary: declaring it a leftover must trip.
    monkeypatch.setattr(celpy_glue, "_LEFTOVERS", (*celpy_glue._LEFTOVERS, "_lazy_and("))
    with pytest.raises(CelEngineError, match=r"still contains \['_lazy_and\('\] after rewriting"):
        make_generator()
