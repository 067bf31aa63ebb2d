"""The issue collector the WDS checks share: a ``Checker`` gathers every
``Issue`` of one file (file, JSON path, message, fix) and checks field types
and unknown keys with a suggestion; ``Entry`` is a function entry whose shape
checked out, before template expansion. No checks of their own live here:
shapes and the graph are in ``_parse``, expansion and its limits in ``_expand``.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .exceptions import Issue

if TYPE_CHECKING:
    from ._model import LambdaSettings

__all__ = ["Checker", "Entry", "IDENT", "key_path", "type_name"]

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def key_path(base: str, key: str) -> str:
    return f"{base}.{key}" if IDENT.match(key) else f"{base}[{json.dumps(key)}]"


def type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


@dataclass
class Entry:
    """A function entry whose shape checked out, before expansion."""

    path: str
    stage_name: str
    stage_id: int
    doc: dict[str, Any]
    lambda_settings: LambdaSettings | None = None  # what the entry sets of its Lambda, checked


@dataclass
class Checker:
    source: str
    issues: list[Issue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def add(self, path: str, message: str, fix: str = "") -> None:
        self.issues.append(Issue(self.source, path, message, fix))

    def unknown_keys(self, obj: Mapping[str, Any], allowed: set[str], path: str) -> None:
        for key in obj:
            if key not in allowed:
                close = difflib.get_close_matches(key, sorted(allowed), n=1)
                fix = f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(sorted(allowed))}"
                self.add(key_path(path, key), f"unknown key {key!r}", fix)

    def field(self, obj: Mapping[str, Any], key: str, path: str, kind: type | tuple[type, ...],
              expected: str, example: str, required: bool = True) -> Any:
        if key not in obj:
            if required:
                self.add(key_path(path, key), f"missing required field {key!r}", f"add {example}")
            return None
        value = obj[key]
        bad_bool = isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))
        if not isinstance(value, kind) or bad_bool:
            self.add(key_path(path, key), f"{key!r} must be {expected}, not {type_name(value)}",
                     f"write it as {example}")
            return None
        return value

    def string_list(self, obj: Mapping[str, Any], key: str, path: str) -> list[str] | None:
        value = self.field(obj, key, path, list, "an array of strings", f'"{key}": ["name", ...]')
        if value is None:
            return None
        ok = True
        for k, item in enumerate(value):
            if not isinstance(item, str) or not item:
                self.add(f"{key_path(path, key)}[{k}]",
                         f"entries of {key!r} must be non-empty strings, not {type_name(item)} {item!r}",
                         "use the object or function name as a string")
                ok = False
        return value if ok else None
