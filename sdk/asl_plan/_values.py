"""Where one Task's result sits in a state's JSON: abstract values and static JSONPath.

The planner follows one Task's result (the *tracked* value) at a time. Every other
piece of JSON (the execution input, constants, other Tasks' results, error objects)
is ``NOTHING`` to it. A value is one of:

- ``NOTHING``: holds no part of the tracked result;
- ``WHOLE``: exactly the tracked result (or, inside a Map over it, one of its items);
- ``Part(why)``: a piece selected from inside the tracked result: whether it carries
  the offloaded value is known only at run time, since a handler offloads whichever
  values inside its result are large;
- ``Unknown(why)``: JSON the planner cannot follow (a dynamic path, an intrinsic
  function, JSONata) that may hold the tracked result;
- ``Obj(fields, rest)``: an object whose listed fields are known and whose other keys
  are those of ``rest`` (a later state's ``ResultPath: $.x`` written into the tracked
  result leaves ``rest`` whole: the state still holds the rest of it);
- ``Arr(items)``: a list of known length (a Parallel's branch outputs);
- ``Each(item)``: a Map's output, one element per iteration, where the iteration that
  holds the tracked value put ``item``.

Paths: ``parse_path`` accepts the static subset of JSONPath (``$``, ``.name``,
``['name']``, ``[n]``); anything else (``*``, ``..``, filters, slices) is not static.

Not here: which states read what (``_flow``), or the ASL model (``_definition``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["Arr", "Each", "NOTHING", "Nothing", "Obj", "Part", "Token", "Unknown", "Value", "WHOLE", "Whole",
           "arr", "contains", "each", "has_tracked", "obj", "parse_path", "select", "set_at"]

Token = str | int


@dataclass(frozen=True, slots=True)
class Nothing:
    pass


@dataclass(frozen=True, slots=True)
class Whole:
    pass


@dataclass(frozen=True, slots=True)
class Part:
    why: str


@dataclass(frozen=True, slots=True)
class Unknown:
    why: str


@dataclass(frozen=True, slots=True)
class Obj:
    fields: tuple[tuple[str, Value], ...]
    rest: Value

    def get(self, key: str) -> Value | None:
        for k, v in self.fields:
            if k == key:
                return v
        return None

    def with_field(self, key: str, value: Value) -> Value:
        fields = [(k, v) for k, v in self.fields if k != key] + [(key, value)]
        return obj(tuple(fields), self.rest)


@dataclass(frozen=True, slots=True)
class Arr:
    items: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Each:
    item: Value
    map_state: str


Value = Nothing | Whole | Part | Unknown | Obj | Arr | Each
NOTHING = Nothing()
WHOLE = Whole()


def obj(fields: tuple[tuple[str, Value], ...], rest: Value) -> Value:
    """``Obj``, kept small: where ``rest`` holds nothing, fields that hold nothing are
    dropped (selecting a missing key gives ``NOTHING`` all the same)."""
    if isinstance(rest, Nothing):
        fields = tuple((k, v) for k, v in fields if not isinstance(v, Nothing))
    return Obj(fields, rest) if fields else rest


def arr(items: tuple[Value, ...]) -> Value:
    """``Arr``, or ``NOTHING`` when no item holds anything."""
    return NOTHING if all(isinstance(v, Nothing) for v in items) else Arr(items)


def each(item: Value, map_state: str) -> Value:
    """``Each``, or ``NOTHING`` when the iterations' outputs hold nothing."""
    return NOTHING if isinstance(item, Nothing) else Each(item, map_state)

_STEP = re.compile(r"""\.([^.\[\]'"*@?()]+)|\[(\d+)\]|\['([^']*)'\]|\["([^"]*)"\]""")


def parse_path(text: object) -> tuple[Token, ...] | None:
    """The tokens of a static JSONPath (``$.a['b c'][0]`` -> ``('a', 'b c', 0)``), or None
    when ``text`` is not one (the context object ``$$``, a variable, ``*``, ``..``, filters)."""
    if not isinstance(text, str) or not text.startswith("$") or text.startswith("$$"):
        return None
    rest, tokens = text[1:], []
    while rest:
        m = _STEP.match(rest)
        if m is None:
            return None
        name, index, quoted1, quoted2 = m.groups()
        tokens.append(int(index) if index is not None else next(t for t in (name, quoted1, quoted2) if t is not None))
        rest = rest[m.end():]
    return tuple(tokens)


Containment = Literal["yes", "no", "part", "unknown"]


def contains(v: Value) -> tuple[Containment, str]:
    """Whether a Task that receives ``v`` receives the tracked result: ``yes`` (all of it
    somewhere), ``no``, or ``part``/``unknown`` with the reason it is not static."""
    if isinstance(v, Nothing):
        return "no", ""
    if isinstance(v, Whole):
        return "yes", ""
    if isinstance(v, Part):
        return "part", v.why
    if isinstance(v, Unknown):
        return "unknown", v.why
    if isinstance(v, Obj):
        parts = [f for _, f in v.fields] + [v.rest]
    elif isinstance(v, Arr):
        parts = list(v.items)
    else:
        parts = [v.item]
    found = [contains(p) for p in parts]
    if any(c == "yes" for c, _ in found):
        return "yes", ""
    for c, why in found:
        if c != "no":
            return c, why
    return "no", ""


def has_tracked(v: Value) -> bool:
    return contains(v)[0] != "no"


def select(v: Value, tokens: tuple[Token, ...], why_part: str) -> Value:
    """The value at ``tokens`` inside ``v``; ``why_part`` explains a selection inside the
    tracked result (it becomes ``Part``'s reason)."""
    for i, tok in enumerate(tokens):
        if isinstance(v, (Nothing, Part, Unknown)):
            return v
        if isinstance(v, Whole):
            return Part(why_part)
        if isinstance(v, Obj):
            if isinstance(tok, int):
                return NOTHING  # an index into an object fails the execution
            field = v.get(tok)
            if field is None:
                return select(v.rest, tokens[i:], why_part)
            v = field
        elif isinstance(v, Arr):
            if not isinstance(tok, int) or tok >= len(v.items):
                return NOTHING
            v = v.items[tok]
        else:  # Each: which iteration's output sits at an index is known at run time
            if not has_tracked(v.item):
                return NOTHING
            return Unknown(f"selects [{tok}] of the output of Map {v.map_state!r}; which iteration's output is there "
                           "is known only at run time")
    return v


def set_at(base: Value, tokens: tuple[Token, ...], value: Value, why_write: str) -> Value:
    """``base`` with ``value`` written at ``tokens`` (ResultPath); ``why_write`` explains a
    write inside the tracked result."""
    if not tokens:
        return value
    tok, more = tokens[0], tokens[1:]
    if isinstance(tok, int):
        if isinstance(base, Arr) and tok < len(base.items):
            items = list(base.items)
            items[tok] = set_at(items[tok], more, value, why_write)
            return arr(tuple(items))
        return Unknown(why_write) if has_tracked(base) or has_tracked(value) else NOTHING
    if isinstance(base, Obj):
        inner = base.get(tok)
        if inner is None:
            inner = select(base.rest, (tok,), why_write)
        return base.with_field(tok, set_at(inner, more, value, why_write))
    if isinstance(base, (Whole, Part, Unknown)):
        rest: Value = base  # the other keys of the tracked result are still there
    else:  # NOTHING; a list or a Map output here fails the execution
        rest = NOTHING
    inner = select(rest, (tok,), why_write)
    return obj(((tok, set_at(inner, more, value, why_write)),), rest)
