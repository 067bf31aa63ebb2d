"""Bounds on what one workflow description may make funcsion do.

A WDS is small text that templates multiply: ``"replicas": 100000``, a
``{0..101}`` range cubed or a 99999999-wide format spec would expand into
millions of names or gigabytes before anything ran. ``Limits`` says how far
a file may go; the parser checks each bound *before* the work it bounds
(the file's size before reading it whole, the JSON nesting before
``json.loads``, counts and widths before any expansion), so a hostile file
costs milliseconds and gets one clear error. The CLI builds ``Limits`` from
the ``wds_max_*`` config fields; the defaults fit real workflows with room
to spare (docs/workflow.md, "Validation").

This module holds the bounds and the checks that run on raw text; the
expansion bounds are checked in ``_expand``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, fields

__all__ = ["Limits", "JSONNumberTooLong", "json_int", "nesting_exceeds", "too_large"]

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.DOTALL)  # closing quote optional: never rescans an open string
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_TO_SQUARE = str.maketrans("{}", "[]")
#: Digits a whole number in a WDS may have (counts and ids; Python refuses past 4300).
MAX_INT_DIGITS = 30


@dataclass(frozen=True, slots=True)
class Limits:
    """How large a workflow description may be, and how far its templates may expand.

    Each field is a config field ``wds_<field>`` (``FUNCSION_WDS_<FIELD>``):

    - ``max_bytes``: size of the file (UTF-8 bytes);
    - ``max_depth``: JSON nesting (objects and arrays) in the file;
    - ``max_functions``: functions after ``replicas`` expansion;
    - ``max_objects``: distinct objects (inputs, intermediates, outputs);
    - ``max_edges``: names in every ``input``, ``output`` and ``next`` list after expansion;
    - ``max_range``: strings one template string expands to (the product of its ranges);
    - ``max_format_width``: width or precision in a ``{i:...}`` / ``{A..B:...}`` format spec.
    """

    max_bytes: int = 4 << 20
    max_depth: int = 32
    max_functions: int = 10_000
    max_objects: int = 200_000
    max_edges: int = 1_000_000
    max_range: int = 100_000
    max_format_width: int = 32

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{f.name} must be a whole number >= 1, not {value!r}")

    @classmethod
    def unlimited(cls) -> Limits:
        """No bound at all: for text funcsion wrote itself (a journal being replayed)."""
        return cls(**{f.name: sys.maxsize for f in fields(cls)})

    @staticmethod
    def setting(name: str) -> str:
        """The config field that sets ``name`` (``max_functions`` -> ``wds_max_functions``)."""
        return f"wds_{name}"


class JSONNumberTooLong(ValueError):
    """A whole number in the JSON text has more than ``MAX_INT_DIGITS`` digits."""


def json_int(text: str) -> int:
    """``parse_int`` for ``json.loads``: refuse absurdly long numbers instead of converting them."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JSONNumberTooLong(f"a whole number has {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def too_large(text: str, max_bytes: int) -> bool:
    """Whether ``text`` is over ``max_bytes`` in UTF-8, encoding it only when that is in doubt."""
    n = len(text)
    if n > max_bytes or n * 4 <= max_bytes:
        return n > max_bytes
    return len(text.encode("utf-8", "surrogatepass")) > max_bytes


def nesting_exceeds(text: str, max_depth: int) -> bool:
    """Whether the JSON text nests objects/arrays deeper than ``max_depth``, found without
    recursion: strings removed, brackets kept, then one innermost level peeled per pass
    (at most ``max_depth`` passes). Unbalanced text is left for ``json.loads`` to report."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text)).translate(_TO_SQUARE)
    for _ in range(max_depth):
        peeled = brackets.replace("[]", "")
        if peeled == brackets:
            return False
        brackets = peeled
    return "[]" in brackets
