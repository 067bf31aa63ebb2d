"""Fan-out templates: one WDS entry that stands for many functions or objects.

Syntax (documented in docs/workflow.md, "Fan-out templates"):

- ``"replicas": N`` on a function entry makes N functions; N is an integer or
  the name of a parameter (declared in the top-level ``params`` object with a
  default, and overridable at deploy/run time).
- ``{i}`` in that entry's ``name``, ``input``, ``output`` and ``next`` is the
  replica index; ``{i:02d}`` formats it with a Python format spec.
- ``{A..B}`` in any ``input``, ``output`` or ``next`` string expands that one
  string into B-A strings, for A <= k < B; A and B are integers or parameter
  names (``counts_{0..mappers}``), and a format spec may follow
  (``{0..mappers:02d}``). Several ranges in one string give their product.

``size`` says how many strings ``expand`` would give (the product of the
ranges) without making them, and both refuse a format spec wider than
``max_width``, so a caller checks its limits before expanding anything.

This module is pure string work; ``_parse`` turns ``TemplateError`` into an
``Issue`` at the right JSON path.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping

__all__ = ["TemplateError", "TOKEN", "expand", "has_index", "param_name", "resolve_count", "size"]

TOKEN = re.compile(r"\{(?:(?P<idx>i)|(?P<lo>\w+)\.\.(?P<hi>\w+))(?::(?P<fmt>[^{}]*))?\}")
# Python's format-spec mini-language for integers: [[fill]align][sign][z][#][0][width][grouping][.precision][type]
_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<prec>\d*))?[bcdeEfFgGnosxX%]?", re.DOTALL)


class TemplateError(ValueError):
    """``starved``: for a range emptied by a parameter, (its name, its value, the least value
    that makes the range non-empty), so a caller can say it once for every string it empties."""

    def __init__(self, message: str, fix: str, starved: tuple[str, int, int] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.starved = starved


def param_name(value: object, params: Mapping[str, int]) -> str | None:
    """The parameter ``value`` names (``"mappers"`` or ``"$mappers"``), if it names one."""
    if isinstance(value, str):
        name = value[1:] if value.startswith("$") else value
        if name in params:
            return name
    return None


def resolve_count(value: object, params: Mapping[str, int], what: str) -> int:
    """An integer, or the value of the named parameter."""
    if isinstance(value, bool):
        raise TemplateError(f"{what} is a boolean", "use a whole number or a parameter name")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        name = value[1:] if value.startswith("$") else value
        if name.isdecimal():
            if len(name) > 18:
                raise TemplateError(f"{what} is a {len(name)}-digit number", "use a whole number below 10**18")
            return int(name)
        if name in params:
            return params[name]
        known = ", ".join(sorted(params)) or "none declared"
        raise TemplateError(
            f"{what} names parameter {_short(name)!r}, which has no value (known: {known})",
            f'declare it in the top-level "params" object, e.g. "params": {{"{_short(name)}": 4}}, '
            f"or pass it at run time with --param {_short(name)}=N",
        )
    raise TemplateError(f"{what} must be a whole number or a parameter name, not {type(value).__name__}",
                        "write e.g. 4 or \"mappers\"")


def _short(text: str, keep: int = 40) -> str:
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text):,} characters)"


def _check_spec(spec: str | None, max_width: int | None) -> None:
    if not spec or max_width is None:
        return
    m = _SPEC.fullmatch(spec)
    if m is None:
        raise TemplateError(f"format spec {_short(spec)!r} is not valid for an integer",
                            "use a spec such as 02d or 03d")
    for part in ("width", "prec"):
        digits = m.group(part)
        if digits and (len(digits) > 9 or int(digits) > max_width):
            what = "width" if part == "width" else "precision"
            asked = f"{int(digits):,}" if len(digits) <= 9 else f"a {len(digits)}-digit number of"
            raise TemplateError(f"format spec {_short(spec)!r} asks for a {what} of {asked} characters, over the "
                                f"limit of {max_width} (wds_max_format_width)",
                                "use a spec such as 02d or 03d, or raise wds_max_format_width in the config")


def _fmt(k: int, spec: str | None) -> str:
    if not spec:
        return str(k)
    try:
        return format(k, spec)
    except ValueError as exc:
        raise TemplateError(f"format spec {spec!r} is not valid for an integer ({exc})",
                            "use a spec such as 02d or 03d") from None


def _bounds(m: re.Match[str], params: Mapping[str, int], text: str) -> tuple[int, int]:
    lo = resolve_count(m.group("lo"), params, f"range start {_short(m.group('lo'))!r} in {_short(text)!r}")
    hi = resolve_count(m.group("hi"), params, f"range end {_short(m.group('hi'))!r} in {_short(text)!r}")
    if hi <= lo:
        name = param_name(m.group("hi"), params)
        raise TemplateError(f"range {{{_short(m.group('lo'))}..{_short(m.group('hi'))}}} in {_short(text)!r} "
                            f"is empty ({lo}..{hi})",
                            "the end is exclusive and must be greater than the start",
                            starved=None if name is None else (name, hi, lo + 1))
    return lo, hi


def size(text: str, params: Mapping[str, int], *, allow_ranges: bool = True, max_width: int | None = None) -> int:
    """How many strings ``expand(text, ...)`` gives: the product of its ranges' lengths
    (1 without ranges). Checks every range and format spec; makes no string."""
    n = 1
    for m in TOKEN.finditer(text):
        _check_spec(m.group("fmt"), max_width)
        if not m.group("idx"):
            if not allow_ranges:
                raise _no_range(text)
            lo, hi = _bounds(m, params, text)
            n *= hi - lo
    return n


def _no_range(text: str) -> TemplateError:
    return TemplateError(f"{_short(text)!r} uses a range, which a function name cannot",
                         "use {i} with \"replicas\" to name replicated functions")


def has_index(text: str) -> bool:
    return any(m.group("idx") for m in TOKEN.finditer(text))


def expand(text: str, params: Mapping[str, int], index: int | None, *, allow_ranges: bool = True,
           max_width: int | None = None) -> list[str]:
    """Expand ``{i}`` (with ``index``) and every ``{A..B}`` range in ``text``; a caller
    bounds the result with ``size`` first."""
    parts: list[list[str]] = []
    pos = 0
    for m in TOKEN.finditer(text):
        parts.append([text[pos:m.start()]])
        spec = m.group("fmt")
        _check_spec(spec, max_width)
        if m.group("idx"):
            if index is None:
                raise TemplateError(
                    f"{_short(text)!r} uses {{i}} outside a replicated function",
                    'add "replicas": N to this function, or use a range such as {0..N}',
                )
            parts.append([_fmt(index, spec)])
        else:
            if not allow_ranges:
                raise _no_range(text)
            lo, hi = _bounds(m, params, text)
            parts.append([_fmt(k, spec) for k in range(lo, hi)])
        pos = m.end()
    parts.append([text[pos:]])
    if len(parts) == 1:
        if "{" in text or "}" in text:
            raise TemplateError(f"{_short(text)!r} has a brace that is not a template",
                                "templates are {i}, {i:02d}, {0..N} or {0..param}; remove stray braces")
        return [text]
    return ["".join(p) for p in itertools.product(*parts)]
