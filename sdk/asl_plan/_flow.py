"""The routes one Task's result takes through a state machine, and who receives it on each.

``Walker(definition, source).routes()`` starts where Task ``source`` has produced its
result and enumerates every way the execution can go on while the state's JSON still
holds that result: each ``Choice`` rule and ``Default``, each ``Catch``, every branch of a
``Parallel`` (all of them run: their routes combine), a ``Map``'s item processor, and out
of the Parallel or Map around ``source``. On each route it applies the JSONPath fields
of every state it passes (``InputPath``, ``Parameters``/``ItemSelector``,
``ResultSelector``, ``ResultPath``, ``OutputPath``: the ``_values`` model) and records
which Task states receive the result in their effective input. A route stops where
the JSON no longer holds the result (a later ``ResultPath`` overwrote it, an
``OutputPath`` dropped it: the route is then an error route if every way on from there
ends in a ``Fail`` state), where its machine ends, at a ``Fail`` state, or where the
planner cannot follow the data any further (then it carries ``dynamic``: why).

Routes that agree on their count, outcome and JSON merge as they are found, and the
routes from a state on are memoised, so a ladder of Choices whose ways read the result
equally often costs one walk, not one per combination; ``MAX_ROUTES`` bounds the rest.

Errors the definition does not catch end the execution (its cleanup frees everything),
so they are not routes; a ``Catch`` is. A Task that fails into its ``Catch`` did not
commit, so it is not a reader on that route; a Parallel or Map that fails may have
let any of its inner readers commit first, so its catch route counts all of them (the
most it can be). ``Retry`` repeats a state without a new route: a retried reader counts
once (its reads commit once, with the attempt that succeeds).

Not here: turning routes into a read count (``_plan``), or reading the definition
(``_definition``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ._definition import Definition, Machine, State
from ._values import (NOTHING, WHOLE, Arr, Each, Nothing, Part, Unknown, Value, Whole, arr, contains, each,
                      has_tracked, obj, parse_path, select, set_at)

__all__ = ["Route", "Walker", "LAMBDA_INVOKE", "MAX_ROUTES"]

#: The optimised Lambda integration: its result holds the handler's return under ``Payload``.
LAMBDA_INVOKE = "arn:aws:states:::lambda:invoke"
#: Routes one result may take before the planner gives up on counting them.
MAX_ROUTES = 10_000
_MAP_ITEM = "$$.Map.Item.Value"
_ARGS = re.compile(r"\$\$?[^,)\s]*")


@dataclass(frozen=True, slots=True)
class Route:
    """One way the execution can go after the tracked result exists."""

    readers: tuple[str, ...] = ()  # Task states that receive it, in order
    steps: tuple[str, ...] = ()  # the choices taken ("Choice 'C' rule 0 -> 'A'", "Catch[0] of 'X' -> 'H'")
    error: bool = False  # went through a Catch, or ended in a Fail state
    failed: bool = False  # ended in a Fail state (its state machine, or its branch, fails)
    dynamic: str | None = None  # why the planner cannot count the reads on this route
    output: Value = NOTHING  # what the route's state machine ends with
    to_output: bool = False  # the result reaches the execution's output
    notes: tuple[str, ...] = ()  # what the user should know that does not change the count
    others: tuple[str, ...] = ()  # readers of routes merged into this one (same count, same outcome)

    def read(self, *names: str) -> Route:
        return replace(self, readers=self.readers + tuple(n for n in names if n not in self.readers))

    def then(self, s: Route) -> Route:
        """This route followed by ``s`` (a route that starts where this one stops)."""
        return Route(self.readers + tuple(n for n in s.readers if n not in self.readers), self.steps + s.steps,
                     self.error or s.error, s.failed, self.dynamic or s.dynamic, s.output, False,
                     self.notes + tuple(n for n in s.notes if n not in self.notes),
                     self.others + tuple(n for n in s.others if n not in self.others))

    def key(self) -> tuple[object, ...]:
        """What the count and every later step depend on: routes with one key merge."""
        return len(self.readers), self.error, self.failed, self.dynamic, self.output, self.notes

    def via(self, step: str, *, error: bool = False) -> Route:
        return replace(self, steps=self.steps + (step,), error=self.error or error)

    def note(self, *notes: str) -> Route:
        return replace(self, notes=self.notes + tuple(n for n in notes if n not in self.notes))

    def stop(self, why: str) -> Route:
        return replace(self, dynamic=self.dynamic or why)

    def describe(self) -> str:
        return " then ".join(self.steps) if self.steps else "the only path"


def _service(resource: object) -> str | None:
    """The service a Task's ``Resource`` calls when it is surely not a Lambda function
    (``arn:aws:states:::dynamodb:putItem`` -> ``dynamodb:putItem``, an activity ARN), else None:
    a Lambda ARN, the Lambda integrations, and anything unrecognised (a ``${...}`` placeholder
    a deployment substitutes) are taken for Lambda."""
    if not isinstance(resource, str):
        return None
    if resource.startswith("arn:aws:states:::"):
        what = resource[len("arn:aws:states:::"):]
        return None if what.startswith("lambda:") else what
    if resource.startswith("arn:aws:states:") and ":activity:" in resource:
        return "an activity"
    return None


class _TooMany(Exception):
    pass


def _merge(routes: list[Route]) -> list[Route]:
    """One route per ``Route.key``: the first keeps its readers and steps (the example the
    plan's ``why`` shows), the others' readers join its ``others``."""
    out: dict[tuple[object, ...], Route] = {}
    for r in routes:
        k = r.key()
        first = out.get(k)
        if first is None:
            out[k] = r
            continue
        known = set(first.readers) | set(first.others)
        extra = tuple(n for n in r.readers + r.others if n not in known)
        if extra:
            out[k] = replace(first, others=first.others + tuple(dict.fromkeys(extra)))
    return list(out.values())


class Walker:
    """Enumerates the routes of Task ``source``'s result (see the module docstring)."""

    def __init__(self, definition: Definition, source: str, *, max_routes: int = MAX_ROUTES) -> None:
        self.d = definition
        self.source = source
        self.max_routes = max_routes
        self._visits = 0
        self._ends: dict[tuple[int, str], bool] = {}
        self._reachable: dict[tuple[int, str], frozenset[str]] = {}
        self._memo: dict[tuple[object, ...], list[Route]] = {}

    # -- entry -----------------------------------------------------------------------
    def routes(self) -> list[Route]:
        st = self.d.state(self.source)
        for outer in self.d.ancestors(self.source):
            if outer.distributed:
                return [Route().stop(f"it runs inside Distributed Map {outer.name!r}, whose iterations are child "
                                     "executions the planner does not follow")]
        if st.jsonata:
            return [Route().stop(f"Task {st.name!r} uses JSONata (QueryLanguage); the planner follows JSONPath only")]
        resource = st.raw.get("Resource")
        result: Value = obj((("Payload", WHOLE),), NOTHING) if resource == LAMBDA_INVOKE else WHOLE
        try:
            assigned = self._assign(st, NOTHING, result)
            if assigned is not None:
                return [Route().stop(assigned)]
            machine = self.d.machines[st.machine]
            routes = self._after(machine, st, Route(), self._after_result(st, NOTHING, result), frozenset({st.name}))
            while machine.owner is not None:
                owner = self.d.state(machine.owner)
                outer_machine = self.d.machines[owner.machine]
                climbed: list[Route] = []
                for r in routes:
                    if r.dynamic or r.failed or not has_tracked(r.output):
                        stuck = not r.dynamic and not r.failed and not self._can_finish(
                            outer_machine, None if owner.end else owner.next)
                        climbed.append(replace(r, output=NOTHING, error=r.error or stuck))
                        continue
                    if owner.type == "Parallel":
                        items: list[Value] = [NOTHING] * len(owner.branches)
                        items[machine.branch or 0] = r.output
                        outer_result: Value = arr(tuple(items))
                    else:
                        outer_result = each(r.output, owner.name)
                    out = self._after_result(owner, NOTHING, outer_result)
                    climbed += self._after(outer_machine, owner, replace(r, output=NOTHING), out,
                                           frozenset({owner.name}))
                routes, machine = climbed, outer_machine
        except (_TooMany, RecursionError):
            return [Route().stop(f"it can take more than {self.max_routes} routes through the state machine; "
                                 "the planner stops counting there")]
        return [replace(r, to_output=not r.failed and not r.dynamic and has_tracked(r.output)) for r in routes]

    # -- walking one state machine ---------------------------------------------------
    def _after(self, m: Machine, st: State, route: Route, out: Value, seen: frozenset[str]) -> list[Route]:
        if st.end:
            return [replace(route, output=out)]
        assert st.next is not None
        return self._walk(m, st.next, out, route, seen)

    def _walk(self, m: Machine, name: str, value: Value, route: Route, seen: frozenset[str]) -> list[Route]:
        """``route`` followed by every route from state ``name`` of ``m``, entered with ``value``."""
        return [route.then(s) for s in self._suffix(m, name, value, seen)]

    def _suffix(self, m: Machine, name: str, value: Value, seen: frozenset[str]) -> list[Route]:
        """The routes from state ``name`` on, each starting empty; memoised (they depend on
        ``seen`` only through the states reachable from ``name``), and merged where their
        counts and outcomes agree, so a ladder of Choices stays linear."""
        key = (m.index, name, value, seen & self._reach(m, name))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        acc = Route()
        out: list[Route] = []
        while True:  # a run of states with one way on is walked here, not by recursion
            self._visits += 1
            if self._visits > self.max_routes * 20:
                raise _TooMany
            if not has_tracked(value):  # nothing more can read it; does the route still end well?
                fails = not self._reaches_end(m, name)
                out.append(acc.then(Route(failed=fails, error=fails)))
                break
            if name in seen:
                out.append(acc.then(Route().stop(f"a loop reaches {name!r} again while the state still holds it, "
                                                 "so it can be read any number of times")))
                break
            steps = self._step(m.states[name], value, Route())
            ends = [replace(r, output=v) for t, r, v in steps if r.dynamic or r.failed or t is None]
            ways = [(t, r, v) for t, r, v in steps if not (r.dynamic or r.failed or t is None)]
            seen = seen | {name}
            if not ends and len(ways) == 1:
                target, r, value = ways[0]
                acc, name = acc.then(r), target
                continue
            out += [acc.then(e) for e in ends]
            out += [acc.then(r).then(s) for t, r, v in ways if t is not None for s in self._suffix(m, t, v, seen)]
            break
        merged = _merge(out)
        self._visits += len(out)  # the work: every route made counts against the budget
        if len(merged) > self.max_routes or self._visits > self.max_routes * 20:
            raise _TooMany
        self._memo[key] = merged
        return merged

    def _reach(self, m: Machine, name: str) -> frozenset[str]:
        """The states of ``m`` reachable from ``name``, itself included."""
        key = (m.index, name)
        hit = self._reachable.get(key)
        if hit is None:
            found, todo = {name}, [name]
            while todo:
                st = m.states[todo.pop()]
                for t in ([st.next] if st.next else []) + [t for t, _ in st.choices] + [c.next for c in st.catchers]:
                    if t not in found:
                        found.add(t)
                        todo.append(t)
            hit = self._reachable[key] = frozenset(found)
        return hit

    def _step(self, st: State, value: Value, route: Route) -> list[tuple[str | None, Route, Value]]:
        """Where the execution goes from state ``st`` entered with ``value``: (next state, or
        None where its machine ends; the route so far; the state's output)."""
        nxt = None if st.end else st.next
        if st.jsonata:
            return [(None, route.stop(f"{st.type} state {st.name!r} uses JSONata (QueryLanguage) and receives it; "
                                      "the planner follows JSONPath only"), NOTHING)]
        if st.type == "Fail":
            return [(None, replace(route, failed=True, error=True), NOTHING)]
        effective = self._path(st, "InputPath", value)
        if st.type in ("Succeed", "Wait"):
            return [(nxt, route, self._path(st, "OutputPath", effective))]
        if st.type == "Choice":
            chosen = self._path(st, "OutputPath", effective)
            route = route.note(*self._choice_notes(st, effective))
            return [(target, route.via(f"Choice {st.name!r} {label} -> {target!r}"), chosen)
                    for target, label in st.choices]
        params_key = "ItemSelector" if st.type == "Map" else "Parameters"
        if st.type == "Map" and "ItemSelector" not in st.raw:
            params_key = "Parameters"  # the legacy spelling
        effective2 = effective if st.type == "Map" else self._template_field(st, "Parameters", effective)
        catches = [(c.next, c, self._catch_value(st, c.raw, value)) for c in st.catchers]
        if st.type == "Pass":
            result = NOTHING if "Result" in st.raw else effective2
            why = self._assign(st, value, result)
            if why:
                return [(None, route.stop(why), NOTHING)]
            return [(nxt, route, self._after_result(st, value, result))]
        if st.type == "Task":
            seen_as, why = contains(effective2)
            if seen_as in ("part", "unknown"):  # it may receive it: listed among the readers, not counted
                return [(None, route.read(st.name).stop(
                    f"Task {st.name!r} receives {'part of ' if seen_as == 'part' else ''}it: {why}"), NOTHING)]
            service = _service(st.raw.get("Resource"))
            if seen_as == "yes" and service is not None:
                return [(None, route.read(st.name).stop(
                    f"Task {st.name!r} receives it but calls {service}, not a Lambda function: it would get the "
                    "reference, never read the value, and never count as its reader"), NOTHING)]
            assigned = self._assign(st, value, NOTHING)
            if assigned:
                return [(None, route.stop(assigned), NOTHING)]
            after = route.read(st.name) if seen_as == "yes" else route
            out: list[tuple[str | None, Route, Value]] = [(nxt, after, self._after_result(st, value, NOTHING))]
            out += [(t, route.via(f"Catch[{c.index}] of {st.name!r} -> {t!r}", error=True), v) for t, c, v in catches]
            return out
        # Parallel and Map: what their inner states do with it
        inner: list[tuple[Route, Value]] = []  # (inner routes' readers and steps, the state's result)
        inner_readers: list[str] = []
        if st.type == "Parallel":
            if has_tracked(effective2):
                per_branch = [self._walk(self.d.machines[b], self.d.machines[b].start, effective2, Route(), frozenset())
                              for b in st.branches]
                for i, routes in enumerate(per_branch):
                    for r in routes:
                        if r.dynamic:
                            return [(None, route.stop(f"in branch {i} of Parallel {st.name!r}, {r.dynamic}"), NOTHING)]
                        inner_readers += [n for n in r.readers + r.others if n not in inner_readers]
                ok = [[r for r in routes if not r.failed] for routes in per_branch]
                for combo in itertools.product(*ok):
                    self._visits += 1
                    if self._visits > self.max_routes * 20:
                        raise _TooMany
                    r = route
                    for branch in combo:
                        r = r.then(replace(branch, output=NOTHING))
                    inner.append((r, arr(tuple(b.output for b in combo))))
            else:
                inner.append((route, NOTHING))
        else:  # Map
            if st.distributed:
                if has_tracked(effective):
                    return [(None, route.stop(f"Distributed Map {st.name!r} receives it: its iterations are child "
                                              "executions (ItemReader / DISTRIBUTED mode) the planner does not "
                                              "follow"), NOTHING)]
                inner.append((route, NOTHING))
            else:
                item = self._item(st, effective)
                selector = st.raw.get(params_key)
                if selector is not None:
                    broadcast = self._template(selector, effective, None, f"{params_key} of Map {st.name!r}")
                    if has_tracked(broadcast):
                        return [(None, route.stop(f"every iteration of Map {st.name!r} receives it through its "
                                                  f"{params_key}: once per item, a number known only at run time"),
                                 NOTHING)]
                    iteration = self._template(selector, NOTHING, item, f"{params_key} of Map {st.name!r}")
                else:
                    iteration = item
                if has_tracked(iteration):
                    assert st.processor is not None
                    proc = self.d.machines[st.processor]
                    for r in self._walk(proc, proc.start, iteration, Route(), frozenset()):
                        if r.dynamic:
                            return [(None, route.stop(f"in the iterations of Map {st.name!r}, {r.dynamic}"), NOTHING)]
                        inner_readers += [n for n in r.readers + r.others if n not in inner_readers]
                        if not r.failed:
                            inner.append((route.then(replace(r, output=NOTHING)), each(r.output, st.name)))
                else:
                    inner.append((route, NOTHING))
        result_out: list[tuple[str | None, Route, Value]] = []
        for r, result in inner:
            why = self._assign(st, value, result)
            if why:
                return [(None, route.stop(why), NOTHING)]
            result_out.append((nxt, r, self._after_result(st, value, result)))
        failing = route.read(*inner_readers)
        result_out += [(t, failing.via(f"Catch[{c.index}] of {st.name!r} -> {t!r}", error=True), v)
                       for t, c, v in catches]
        return result_out

    def _choice_notes(self, st: State, effective: Value) -> list[str]:
        """A Choice rule that tests a value inside the result: if the handler offloaded that
        value, the rule sees a reference."""
        notes: list[str] = []

        def visit(rule: Any) -> None:
            if isinstance(rule, list):
                for r in rule:
                    visit(r)
            elif isinstance(rule, Mapping):
                for k, v in rule.items():
                    if k in ("And", "Or", "Not"):
                        visit(v)
                    elif (k == "Variable" or k.endswith("Path")) and isinstance(v, str):
                        tokens = parse_path(v)
                        if tokens is not None and isinstance(select(effective, tokens, ""), Part):
                            notes.append(f"Choice {st.name!r} tests {v} inside it: if the handler offloads that "
                                         "value, the Choice sees a reference; keep it small or outside the result")

        visit(st.raw.get("Choices"))
        return notes

    # -- where a route can end ---------------------------------------------------------
    def _reaches_end(self, m: Machine, name: str) -> bool:
        """Whether some transition path from ``name`` ends machine ``m`` without a Fail state."""
        key = (m.index, name)
        hit = self._ends.get(key)
        if hit is None:
            seen, todo, hit = {name}, [name], False
            while todo and not hit:
                st = m.states[todo.pop()]
                hit = st.end or st.type == "Succeed"
                for t in ([st.next] if st.next else []) + [t for t, _ in st.choices] + [c.next for c in st.catchers]:
                    if t not in seen:
                        seen.add(t)
                        todo.append(t)
            self._ends[key] = hit
        return hit

    def _can_finish(self, m: Machine, name: str | None) -> bool:
        """Whether the execution can still succeed from state ``name`` of ``m`` (None: ``m``
        has just ended), out through the Parallels and Maps around it."""
        if name is not None and not self._reaches_end(m, name):
            return False
        if m.owner is None:
            return True
        owner = self.d.state(m.owner)
        return self._can_finish(self.d.machines[owner.machine], None if owner.end else owner.next)

    # -- the JSONPath fields ---------------------------------------------------------
    def _inside(self, what: str) -> str:
        return f"{what} selects inside the result of {self.source!r}"

    def _path(self, st: State, key: str, v: Value) -> Value:
        """``InputPath`` / ``OutputPath`` / ``ItemsPath`` of ``st`` applied to ``v``."""
        if key not in st.raw:
            return v
        text = st.raw[key]
        if text is None or (isinstance(text, str) and text.startswith("$$")):
            return NOTHING  # null: the state sees {}; the context object holds no task results
        tokens = parse_path(text)
        if tokens is None:
            return Unknown(f"{key} {text!r} of {st.name!r} is not a static path") if has_tracked(v) else NOTHING
        return select(v, tokens, self._inside(f"{key} {text!r} of {st.name!r}"))

    def _after_result(self, st: State, raw: Value, result: Value) -> Value:
        """``ResultSelector``, ``ResultPath`` and ``OutputPath`` of ``st``: its output, from
        its raw input and its result."""
        if "ResultSelector" in st.raw and st.type != "Pass":
            result = self._template(st.raw["ResultSelector"], result, None, f"ResultSelector of {st.name!r}")
        out = self._result_path(st.name, st.raw, raw, result)
        return self._path(st, "OutputPath", out)

    def _catch_value(self, st: State, catcher: Mapping[str, Any], raw: Value) -> Value:
        """What a catcher passes on: the error object at its ``ResultPath`` (default ``$``)."""
        return self._result_path(f"the catcher of {st.name}", catcher, raw, NOTHING)

    def _result_path(self, who: str, raw_doc: Mapping[str, Any], raw: Value, result: Value) -> Value:
        if "ResultPath" in raw_doc and raw_doc["ResultPath"] is None:
            return raw  # null: the result is discarded
        text = raw_doc.get("ResultPath", "$")
        tokens = parse_path(text)
        if tokens is None:
            return (Unknown(f"ResultPath {text!r} of {who!r} is not a static path")
                    if has_tracked(raw) or has_tracked(result) else NOTHING)
        return set_at(raw, tokens, result, f"{who!r} writes its result inside the result of {self.source!r} "
                                           f"(ResultPath {text!r})")

    def _template_field(self, st: State, key: str, v: Value) -> Value:
        if key not in st.raw:
            return v
        return self._template(st.raw[key], v, None, f"{key} of {st.name!r}")

    def _template(self, t: Any, inp: Value, item: Value | None, where: str) -> Value:
        """A payload template (``Parameters``, ``ResultSelector``, ``ItemSelector``, ``Assign``)
        evaluated on ``inp``; ``item`` is ``$$.Map.Item.Value`` inside a Map's selector."""
        if isinstance(t, Mapping):
            fields: list[tuple[str, Value]] = []
            for k, x in t.items():
                if isinstance(k, str) and k.endswith(".$"):
                    fields.append((k[:-2], self._expr(x, inp, item, f"{where} {k!r}")))
                else:
                    fields.append((str(k), self._template(x, inp, item, where)))
            return obj(tuple(fields), NOTHING)
        if isinstance(t, list):
            return arr(tuple(self._template(x, inp, item, where) for x in t))
        return NOTHING

    def _expr(self, x: Any, inp: Value, item: Value | None, where: str) -> Value:
        if not isinstance(x, str):
            return NOTHING
        if x.startswith("States."):
            args = [self._expr(a, inp, item, where) for a in _ARGS.findall(x)]
            if any(has_tracked(a) for a in args):
                fn = x.split("(", 1)[0]
                return Unknown(f"{where} passes it to the intrinsic function {fn}; the planner does not follow "
                               "what intrinsic functions return")
            return NOTHING
        if x.startswith("$$"):
            if item is not None and x.startswith(_MAP_ITEM):
                tokens = parse_path("$" + x[len(_MAP_ITEM):])
                if tokens is None:
                    return Unknown(f"{where} = {x!r} is not a static path") if has_tracked(item) else NOTHING
                return select(item, tokens, self._inside(f"{where} = {x!r}"))
            return NOTHING  # the context object holds no task results
        if x.startswith("$") and x != "$" and x[1] not in ".[":
            return NOTHING  # a variable: one that could hold it is refused where it is assigned
        tokens = parse_path(x)
        if tokens is None:
            return Unknown(f"{where} = {x!r} is not a static path") if has_tracked(inp) else NOTHING
        return select(inp, tokens, self._inside(f"{where} = {x!r}"))

    def _assign(self, st: State, raw: Value, result: Value) -> str | None:
        """Why the count stops being static at ``st``'s ``Assign``, or None."""
        if "Assign" not in st.raw:
            return None
        for v in (raw, result):
            if has_tracked(self._template(st.raw["Assign"], v, None, f"Assign of {st.name!r}")):
                return f"state {st.name!r} assigns it to a variable (Assign); the planner does not follow variables"
        return None

    def _item(self, st: State, effective: Value) -> Value:
        """What one iteration of Map ``st`` gets as ``$$.Map.Item.Value`` (from its ``ItemsPath``)."""
        items = self._path(st, "ItemsPath", effective)
        if isinstance(items, (Nothing, Whole, Part, Unknown)):
            return items  # over the tracked result itself: each item counts on its own
        if isinstance(items, Each):
            return items.item  # over a Map's output: one iteration holds it
        if isinstance(items, Arr):
            holding = [v for v in items.items if has_tracked(v)]
            if len(holding) > 1:
                return Unknown(f"several items of the list Map {st.name!r} iterates over hold it")
            return holding[0] if holding else NOTHING
        return (Unknown(f"the ItemsPath of Map {st.name!r} selects an object that holds it, not a list")
                if has_tracked(items) else NOTHING)
