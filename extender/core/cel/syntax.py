"""Source-level pieces of compiling: cel-go's error format, and the optional-selection syntax
(``a.?f``, ``a[?k]``) that celpy's grammar lacks, rewritten to library calls before parsing."""

from __future__ import annotations

import re

import lark

from extender.core.cel.errors import CelCompileError

__all__ = ["located", "node_error", "rewrite_optional_syntax", "syntax_error"]


def syntax_error(text: str, exc: lark.exceptions.UnexpectedInput) -> str:
    line = getattr(exc, "line", 1) or 1
    column = getattr(exc, "column", 1) or 1
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        what = f"token recognition error at: '{exc.char}'"
    elif isinstance(exc, lark.exceptions.UnexpectedEOF) or (
        isinstance(exc, lark.exceptions.UnexpectedToken) and exc.token.type == "$END"
    ):
        what = "unexpected end of input"
    elif isinstance(exc, lark.exceptions.UnexpectedToken):
        what = f"mismatched input '{exc.token}'"
    else:
        what = "syntax error"
    return located(text, line, column, f"Syntax error: {what}")


def located(text: str, line: int, column: int, message: str) -> str:
    """cel-go's issue format: location, message, then the source line with a caret."""
    lines = text.splitlines() or [""]
    source = lines[min(max(line, 1), len(lines)) - 1]
    return f"ERROR: <input>:{line}:{column}: {message}\n | {source}\n | {'.' * (column - 1)}^"


def node_error(text: str, node: lark.Tree, message: str) -> CelCompileError:
    meta = node.meta
    line = getattr(meta, "line", 1) if not meta.empty else 1
    column = getattr(meta, "column", 1) if not meta.empty else 1
    return CelCompileError(located(text, line, column, message))


_IDENT_RE = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")


def _string_end(text: str, start: int) -> int:
    """Index just after the string literal whose opening quote is at ``start``."""
    quote = text[start]
    delimiter = quote * 3 if text.startswith(quote * 3, start) else quote
    i = start + len(delimiter)
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(delimiter, i):
            return i + len(delimiter)
        i += 1
    return len(text)  # unterminated: the parser reports it


def rewrite_optional_syntax(text: str) -> str:
    """``a.?f`` -> ``a.__optsel__("f")`` and ``a[?k]`` -> ``a.__optindex__(k)``."""
    if "?" not in text:
        return text
    out: list[str] = []
    closers: list[str] = []  # per open bracket: what closes it in the output
    previous = ""  # the last significant character, or "x" after an operand
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "\"'":
            end = _string_end(text, i)
            out.append(text[i:end])
            previous, i = "x", end
            continue
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            out.append(text[i:end])
            i = end
            continue
        after = _skip_space(text, i + 1)
        if ch == "." and after < len(text) and text[after] == "?":
            ident = _IDENT_RE.match(text, _skip_space(text, after + 1))
            if ident is None:
                raise CelCompileError("optional field selection (.?) must be followed by a field name")
            out.append(f'.__optsel__("{ident.group()}")')
            previous, i = "x", ident.end()
            continue
        if ch == "[" and after < len(text) and text[after] == "?":
            if previous not in ("x", ")", "]", "}"):
                raise CelCompileError("optional list elements ([?x]) are not supported by this CEL engine")
            out.append(".__optindex__(")
            closers.append(")")
            previous, i = "[", after + 1
            continue
        if ch == "?" and previous in ("{", ","):
            raise CelCompileError(
                "optional entries in list or map literals ([?x], {?k: v}) are not supported by this CEL engine"
            )
        if ch in "([{":
            closers.append({"(": ")", "[": "]", "{": "}"}[ch])
        elif ch in ")]}" and closers:
            closer = closers.pop()
            if ch == "]" and closer == ")":
                ch = ")"
        out.append(ch)
        if not ch.isspace():
            previous = "x" if (ch.isalnum() or ch == "_") else ch
        i += 1
    return "".join(out)


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i
