"""Read counts for every Task state of a state machine: the rules, and the plan they make.

For each Task state ``T``, the planner follows ``T``'s result through the definition
(``_flow``: every route the execution can take while the state's JSON still holds it)
and decides:

1. **Readers.** A Task state *receives* ``T``'s result when its effective input (after
   its ``InputPath`` and ``Parameters``) holds all of it. It counts once per route, however
   often it is retried. A Task that receives only a piece selected from inside the
   result (``$.r.items``), or JSON the planner cannot follow, makes the count not static.
2. **One route.** The read count is the number of Task states that receive the result
   on the route taken.
3. **Choice.** One rule runs, so every route that ends without error must have the same
   count; if they differ the count is not static::

       T -> C (Choice) -> A reads -> End         T -> C -> A reads -> End
                       -> B reads -> End                 -> B -> Z reads -> End
       read_count 1, readers [A, B]              null: 1 read via A, 2 via B

4. **Errors.** A route that goes through a ``Catch`` or ends in a ``Fail`` state may read
   it fewer times than the count (it is then kept until the execution ends, whose
   cleanup frees it); more reads than the count would free it early, so that makes the
   count not static. A Task that fails into its ``Catch`` did not commit: it is not a
   reader on that route. An error no ``Catch`` handles ends the execution: not a route.
5. **Parallel.** Every branch runs: each branch's start receives the Parallel's input, the
   branch counts add up (``P`` with three branches that each read it: 3), and the
   Parallel's result is the list of branch outputs.
6. **Map (inline).** Over ``T``'s result (``ItemsPath`` selects it): each item is a unit of
   its own, read by its iteration's readers; a reader of the whole list afterwards reads
   every item once more. ``T`` inside the item processor: each iteration's result is a
   unit, and the Map's output (the list of iteration outputs) carries it on. Sent to
   every iteration (an ``ItemSelector`` field that selects it): read once per item, a
   number known only at run time: not static.
7. **Not static** (``read_count`` null): a Distributed Map (``ItemReader`` or mode
   ``DISTRIBUTED``: child executions), JSONata (``QueryLanguage``), an intrinsic
   function or a non-static JSONPath (``*``, ``..``, filters) applied to it, a variable
   (``Assign``) that holds it, a loop that can read it again, Choice routes that differ,
   a service integration that receives it (``arn:aws:states:::dynamodb:putItem``, an
   activity: it would get the reference and never commit a read), more than
   ``MAX_ROUTES`` routes.
8. **Kept until the end** (``kept_until_end``): whenever the count is null, when it is 0
   (nothing receives it: it is discarded, or only reaches the execution's output), and
   when it reaches the execution's output (the caller of the execution may read it).

Notes: a Choice rule that tests a value inside the result (``Variable: $.t.status``)
does not change the count, but if the handler offloads that value the Choice sees a
reference; the plan's ``why`` ends with a note saying so.

For ``arn:aws:states:::lambda:invoke`` the handler's return is the ``Payload`` of the
Task's result, so ``ResultSelector: {"r.$": "$.Payload"}`` or ``OutputPath: $.Payload``
pass it on whole; any other resource's result is the value itself.

Not here: the walk (``_flow``), the JSON model (``_values``), drawing (``_picture``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._definition import Definition, parse
from ._flow import MAX_ROUTES, Route, Walker
from .exceptions import AslError

__all__ = ["Plan", "StatePlan", "decide", "dumps", "load", "plan"]


@dataclass(frozen=True, slots=True)
class StatePlan:
    """What the plan says of one Task state's result."""

    state: str
    read_count: int | None  # None: not static
    readers: tuple[str, ...]  # Task states that can receive it (on any route, all or part of it), in order
    kept_until_end: bool
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"read_count": self.read_count, "readers": list(self.readers),
                "kept_until_end": self.kept_until_end, "why": self.why}


@dataclass(frozen=True)
class Plan:
    """The plan of a whole state machine: ``states`` maps each Task state, in definition
    order, to its ``StatePlan``."""

    states: dict[str, StatePlan]
    definition: Definition

    def to_dict(self) -> dict[str, Any]:
        """``{"states": {"<name>": {"read_count", "readers", "kept_until_end", "why"}}}``."""
        return {"states": {n: p.to_dict() for n, p in self.states.items()}}


def plan(definition: str | bytes | Mapping[str, Any], *, max_routes: int = MAX_ROUTES) -> Plan:
    """The read-count plan of a state machine definition (a dict or JSON text); raises
    ``AslError`` (JSON path and fix) when the definition cannot be read."""
    d = parse(definition)
    states = {st.name: decide(st.name, Walker(d, st.name, max_routes=max_routes).routes())
              for st in d.states() if st.type == "Task"}
    return Plan(states, d)


def load(path: str | Path, *, max_routes: int = MAX_ROUTES) -> Plan:
    """``plan`` of the definition in file ``path``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise AslError(str(path), f"cannot read the file ({reason})",
                       "pass the path of a state machine definition (JSON)") from None
    return plan(text, max_routes=max_routes)


def _names(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(names) if names else "no Task state"


def _times(n: int) -> str:
    return f"{n} time{'s' if n != 1 else ''}"


def decide(state: str, routes: list[Route]) -> StatePlan:
    """Rules 2-8 of the module docstring over the routes of ``state``'s result, with the
    routes' notes (a Choice testing a value inside it) after the reason."""
    p = _decide(state, routes)
    notes: list[str] = []
    for r in routes:
        notes += [n for n in r.notes if n not in notes]
    if not notes:
        return p
    return StatePlan(p.state, p.read_count, p.readers, p.kept_until_end,
                     p.why + "".join(f"; note: {n}" for n in notes))


def _decide(state: str, routes: list[Route]) -> StatePlan:
    readers: list[str] = []
    for r in routes:
        readers += [n for n in r.readers + r.others if n not in readers]
    union = tuple(readers)
    for r in routes:
        if r.dynamic:
            return StatePlan(state, None, union, True, f"not static: {r.dynamic}")
    ok = [r for r in routes if not r.error]
    errors = [r for r in routes if r.error]
    by_count: dict[int, Route] = {}
    for r in ok:
        by_count.setdefault(len(r.readers), r)
    if len(by_count) > 1:
        shown = "; ".join(f"{_times(n)} via {r.describe()} ({_names(r.readers)})"
                          for n, r in sorted(by_count.items()))
        return StatePlan(state, None, union, True,
                         f"not static: the routes a Choice picks from read it a different number of times: {shown}")
    count = next(iter(by_count)) if by_count else max((len(r.readers) for r in errors), default=0)
    over = [r for r in errors if len(r.readers) > count]
    if over:
        r = over[0]
        return StatePlan(state, None, union, True,
                         f"not static: the error route via {r.describe()} reads it {_times(len(r.readers))} "
                         f"({_names(r.readers)}), more than the {count} of the route that succeeds")
    fewer = [r for r in errors if len(r.readers) < count]
    note = (f"; the error route via {fewer[0].describe()} reads it {_times(len(fewer[0].readers))}, so there "
            "it is kept until the execution ends" if fewer else "")
    to_output = any(r.to_output for r in routes)
    if count == 0:
        where = ("it reaches the execution's output" if to_output
                 else "the state machine discards it before any Task reads it")
        return StatePlan(state, 0, (), True, f"no Task state receives it ({where}); it is kept until the "
                                             "execution ends")
    if to_output:
        return StatePlan(state, count, union, True,
                         f"read {_times(count)} on each route (by {_names(union)}) and it reaches the execution's "
                         "output, so it is kept until the execution ends" + note)
    each = "on every route" if len(routes) > 1 or any(r.others or r.steps for r in routes) else "on its route"
    return StatePlan(state, count, union, False,
                     f"read {_times(count)} {each} (by {_names(union)}); freed at the last reader's commit" + note)


def dumps(p: Plan) -> str:
    """The ``--json`` document, indented."""
    return json.dumps(p.to_dict(), indent=2)
