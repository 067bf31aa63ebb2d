"""Fan-out templates: one WDS entry that stands for many functions or objects.

Syntax (documented in README, "Fan-out templates"):

- ``"replicas": N`` on a function entry makes N functions; N is an integer or
  the name of a parameter (declared in the top-level ``params`` object with a
  default, and overridable at deploy/run time).
- ``{i}`` in that entry's ``name``, ``input``, ``output`` and ``next`` is the
  replica index; ``{i:02d}`` formats it with a Python format spec.
- ``{A..B}`` in any ``input``, ``output`` or ``next`` string expands that one
  string into B-A strings, for A <= k < B; A and B are integers or parameter
  names (``counts_{0..mappers}``), and a format spec may follow
  (``{0..mappers:02d}``). Several ranges in one string give their product.

This module is pure string work; ``_parse`` turns ``TemplateError`` into an
``Issue`` at the right JSON path.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping

__all__ = ["TemplateError", "TOKEN", "expand", "has_index", "resolve_count"]

TOKEN = re.compile(r"\{(?:(?P<idx>i)|(?P<lo>\w+)\.\.(?P<hi>\w+))(?::(?P<fmt>[^{}]*))?\}")


class TemplateError(ValueError):
    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


def resolve_count(value: object, params: Mapping[str, int], what: str) -> int:
    """An integer, or the value of the named parameter."""
    if isinstance(value, bool):
        raise TemplateError(f"{what} is a boolean", "use a whole number or a parameter name")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        name = value[1:] if value.startswith("$") else value
        if name.isdigit():
            return int(name)
        if name in params:
            return params[name]
        known = ", ".join(sorted(params)) or "none declared"
        raise TemplateError(
            f"{what} names parameter {name!r}, which has no value (known: {known})",
            f'declare it in the top-level "params" object, e.g. "params": {{"{name}": 4}}, '
            f"or pass it at run time with --param {name}=N",
        )
    raise TemplateError(f"{what} must be a whole number or a parameter name, not {type(value).__name__}",
                        "write e.g. 4 or \"mappers\"")


def _fmt(k: int, spec: str | None) -> str:
    if not spec:
        return str(k)
    try:
        return format(k, spec)
    except ValueError as exc:
        raise TemplateError(f"format spec {spec!r} is not valid for an integer ({exc})",
                            "use a spec such as 02d or 03d") from None


def has_index(text: str) -> bool:
    return any(m.group("idx") for m in TOKEN.finditer(text))


def expand(text: str, params: Mapping[str, int], index: int | None, *, allow_ranges: bool = True) -> list[str]:
    """Expand ``{i}`` (with ``index``) and every ``{A..B}`` range in ``text``."""
    parts: list[list[str]] = []
    pos = 0
    for m in TOKEN.finditer(text):
        parts.append([text[pos:m.start()]])
        spec = m.group("fmt")
        if m.group("idx"):
            if index is None:
                raise TemplateError(
                    f"{text!r} uses {{i}} outside a replicated function",
                    'add "replicas": N to this function, or use a range such as {0..N}',
                )
            parts.append([_fmt(index, spec)])
        else:
            if not allow_ranges:
                raise TemplateError(f"{text!r} uses a range, which a function name cannot",
                                    "use {i} with \"replicas\" to name replicated functions")
            lo = resolve_count(m.group("lo"), params, f"range start {m.group('lo')!r} in {text!r}")
            hi = resolve_count(m.group("hi"), params, f"range end {m.group('hi')!r} in {text!r}")
            if hi <= lo:
                raise TemplateError(f"range {{{m.group('lo')}..{m.group('hi')}}} in {text!r} is empty ({lo}..{hi})",
                                    "the end is exclusive and must be greater than the start")
            parts.append([_fmt(k, spec) for k in range(lo, hi)])
        pos = m.end()
    parts.append([text[pos:]])
    if len(parts) == 1:
        if "{" in text or "}" in text:
            raise TemplateError(f"{text!r} has a brace that is not a template",
                                "templates are {i}, {i:02d}, {0..N} or {0..param}; remove stray braces")
        return [text]
    return ["".join(p) for p in itertools.product(*parts)]
