"""Reading an Amazon States Language definition into a checked model.

``parse(definition)`` takes the definition as a dict or as JSON text and returns a
``Definition``: the top-level ``Machine`` and, nested in ``Parallel`` branches and
``Map`` item processors, the machines inside it, with every state's transitions
(``Next``, ``End``, ``Choice`` rules and ``Default``, ``Catch``) resolved and checked.

What it refuses, each as one ``AslError`` naming the JSON path and the fix: text that is
not JSON, a key written twice in one object, a missing or unknown ``StartAt``, a state
without ``Type`` or with an unknown one, a ``Next``/``Default``/``Catch`` target that
names no state of its machine, a state with neither ``Next`` nor ``End`` (or both), a
``Choice`` without rules, a ``Parallel`` without branches, a ``Map`` without an item
processor, two states with one name anywhere in the definition (Step Functions wants
names unique in the whole state machine), and a state that no transition reaches.

What it does not do: follow the data (``_flow`` and ``_plan``), or check what Step
Functions checks beyond the shape the planner needs (``ErrorEquals`` spelling, retry
numbers, ARNs, JSONPath syntax: a path the planner cannot follow is "not static" in
the plan, not an error).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from .exceptions import AslError

__all__ = ["Catcher", "Definition", "Machine", "State", "StateType", "STATE_TYPES", "parse", "json_path"]

StateType = Literal["Task", "Pass", "Choice", "Wait", "Succeed", "Fail", "Parallel", "Map"]
STATE_TYPES: tuple[StateType, ...] = ("Task", "Pass", "Choice", "Wait", "Succeed", "Fail", "Parallel", "Map")
_TERMINAL = ("Succeed", "Fail")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def json_path(base: str, *keys: str | int) -> str:
    """``json_path("$.States", "Fetch data", "Next")`` -> ``$.States['Fetch data'].Next``."""
    out = base
    for k in keys:
        if isinstance(k, int):
            out += f"[{k}]"
        elif _NAME.fullmatch(k):
            out += f".{k}"
        else:
            out += "[" + json.dumps(k).replace("'", "\\'").replace('"', "'") + "]"
    return out


@dataclass(frozen=True, slots=True)
class Catcher:
    """One entry of a state's ``Catch`` list."""

    index: int
    next: str
    raw: Mapping[str, Any]  # the catcher's JSON (``ResultPath`` is read from it)


@dataclass(frozen=True, slots=True)
class State:
    """One state, its JSON and its resolved transitions."""

    name: str
    type: StateType
    path: str  # the state's JSON path in the definition, e.g. ``$.States.P.Branches[0].States.A``
    raw: Mapping[str, Any]
    machine: int  # index of its machine in ``Definition.machines``
    next: str | None
    end: bool
    choices: tuple[tuple[str, str], ...] = ()  # Choice: (target, label) for each rule, then Default
    catchers: tuple[Catcher, ...] = ()
    branches: tuple[int, ...] = ()  # Parallel: machine indices, in branch order
    processor: int | None = None  # Map: the item processor's machine index
    distributed: bool = False  # Map: a Distributed Map (ItemReader or ProcessorConfig.Mode DISTRIBUTED)
    jsonata: bool = False  # QueryLanguage JSONata (the state's or the definition's)


@dataclass(frozen=True, slots=True)
class Machine:
    """The states of the top level, one Parallel branch, or one Map item processor."""

    index: int
    start: str
    path: str  # JSON path of the object holding StartAt and States
    states: dict[str, State]
    owner: str | None = None  # the Parallel or Map state that runs it (None: the top level)
    branch: int | None = None  # Parallel: which branch


@dataclass
class Definition:
    """A parsed state machine: ``machines[0]`` is the top level."""

    machines: list[Machine] = field(default_factory=list)

    @property
    def top(self) -> Machine:
        return self.machines[0]

    def state(self, name: str) -> State:
        for m in self.machines:
            if name in m.states:
                return m.states[name]
        raise KeyError(name)

    def states(self) -> list[State]:
        """Every state, in definition order (a Parallel's or Map's inner states right after it)."""
        out: list[State] = []

        def visit(m: Machine) -> None:
            for st in m.states.values():
                out.append(st)
                for b in st.branches:
                    visit(self.machines[b])
                if st.processor is not None:
                    visit(self.machines[st.processor])

        visit(self.top)
        return out

    def ancestors(self, name: str) -> list[State]:
        """The Parallel and Map states around state ``name``, innermost first."""
        out: list[State] = []
        m = self.machines[self.state(name).machine]
        while m.owner is not None:
            owner = self.state(m.owner)
            out.append(owner)
            m = self.machines[owner.machine]
        return out


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise _Duplicate(k)
        seen[k] = v
    return seen


class _Duplicate(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _load(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _Duplicate as exc:
        where = _find_duplicate(text, exc.key)
        raise AslError(where, f"the key {exc.key!r} is written twice in one object (JSON keeps only the last)",
                       "give each state a unique name and each field one value") from None
    except json.JSONDecodeError as exc:
        raise AslError(f"line {exc.lineno} column {exc.colno}", f"not JSON ({exc.msg})",
                       "fix the syntax there (a state machine definition is one JSON object)") from None


def _find_duplicate(text: str, key: str) -> str:
    """The JSON path of the object that holds ``key`` twice (found by re-reading with paths)."""
    found: list[str] = []

    def walk(v: Any, path: str) -> None:
        if isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, json_path(path, i))
        elif isinstance(v, _Pairs):
            keys = [k for k, _ in v.pairs]
            if keys.count(key) > 1 and not found:
                found.append(json_path(path, key))
            for k, x in v.pairs:
                walk(x, json_path(path, k))

    walk(json.loads(text, object_pairs_hook=_Pairs), "$")
    return found[0] if found else "$"


class _Pairs:
    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


def parse(definition: str | bytes | Mapping[str, Any]) -> Definition:
    """Check ``definition`` (a dict or JSON text) and return its model; ``AslError`` names
    the first problem (see the module docstring)."""
    doc: Any
    if isinstance(definition, (str, bytes)):
        doc = _load(definition.decode() if isinstance(definition, bytes) else definition)
    else:
        doc = definition
    if not isinstance(doc, Mapping):
        raise AslError("$", f"the definition is a JSON {type(doc).__name__}, not an object",
                       'write one object with "StartAt" and "States"')
    top_language = doc.get("QueryLanguage", "JSONPath")
    if top_language not in ("JSONPath", "JSONata"):
        raise AslError("$.QueryLanguage", f"{top_language!r} is not a query language",
                       'write "JSONPath" or "JSONata"')
    out = Definition()
    names: dict[str, str] = {}  # state name -> its JSON path (names are unique in the whole definition)
    _machine(doc, "$", out, names, top_language == "JSONata", owner=None, branch=None)
    return out


def _machine(doc: Mapping[str, Any], path: str, out: Definition, names: dict[str, str], jsonata: bool,
             owner: str | None, branch: int | None) -> int:
    if "StartAt" not in doc:
        raise AslError(json_path(path, "StartAt"), "missing",
                       'add "StartAt": "<name of the first state>"')
    start = doc["StartAt"]
    if not isinstance(start, str):
        raise AslError(json_path(path, "StartAt"), f"must be a state's name (a string), not {start!r}",
                       "write the name of the first state")
    states_doc = doc.get("States")
    if not isinstance(states_doc, Mapping) or not states_doc:
        what = "missing" if states_doc is None else "empty" if isinstance(states_doc, Mapping) else "not an object"
        raise AslError(json_path(path, "States"), what,
                       'add "States": {"<name>": {"Type": "Task", ...}} with at least the StartAt state')
    if start not in states_doc:
        raise AslError(json_path(path, "StartAt"), f"{start!r} names no state here ({_listing(states_doc)})",
                       "name one of them")
    index = len(out.machines)
    states: dict[str, State] = {}
    out.machines.append(Machine(index, start, path, states, owner, branch))  # states filled below
    for name, raw in states_doc.items():
        spath = json_path(path, "States", name)
        if name in names:
            raise AslError(spath, f"a second state named {name!r} (the first is {names[name]})",
                           "rename one: state names are unique in the whole state machine, branches included")
        names[name] = spath
        states[name] = _state(name, raw, spath, index, out, names, jsonata, states_doc)
    _check_reachable(out.machines[index])
    return index


def _listing(states: Mapping[str, Any]) -> str:
    shown = list(states)[:8]
    return "its states: " + ", ".join(repr(s) for s in shown) + (", ..." if len(states) > 8 else "")


def _target(value: Any, where: str, states: Mapping[str, Any]) -> str:
    if not isinstance(value, str):
        raise AslError(where, f"must name a state (a string), not {value!r}", "write a state's name")
    if value not in states:
        raise AslError(where, f"{value!r} names no state in this state machine ({_listing(states)})",
                       f"name one of them or add a state {value!r}")
    return value


def _state(name: str, raw: Any, path: str, machine: int, out: Definition, names: dict[str, str],
           jsonata: bool, siblings: Mapping[str, Any]) -> State:
    if not isinstance(raw, Mapping):
        raise AslError(path, f"a state must be an object, not {type(raw).__name__}",
                       'write {"Type": "Task", ...}')
    if "Type" not in raw:
        raise AslError(json_path(path, "Type"), "missing",
                       f'add "Type": one of {", ".join(STATE_TYPES)}')
    typ = raw["Type"]
    if typ not in STATE_TYPES:
        raise AslError(json_path(path, "Type"), f"{typ!r} is not a state type",
                       f"write one of {', '.join(STATE_TYPES)}")
    language = raw.get("QueryLanguage")
    if language is not None and language not in ("JSONPath", "JSONata"):
        raise AslError(json_path(path, "QueryLanguage"), f"{language!r} is not a query language",
                       'write "JSONPath" or "JSONata"')
    is_jsonata = language == "JSONata" or (language is None and jsonata)
    nxt: str | None = None
    end = raw.get("End") is True
    if typ in _TERMINAL or typ == "Choice":
        for key in ("Next", "End"):
            if key in raw:
                raise AslError(json_path(path, key), f"a {typ} state takes no {key}",
                               "remove it" + (" (a Choice state moves on by its rules and Default)"
                                              if typ == "Choice" else " (it ends its state machine)"))
    else:
        if "Next" in raw and end:
            raise AslError(path, 'has both "Next" and "End": true', "keep one of them")
        if "Next" in raw:
            nxt = _target(raw["Next"], json_path(path, "Next"), siblings)
        elif not end:
            raise AslError(path, 'has neither "Next" nor "End": true',
                           'add "Next": "<state>" or "End": true')
    choices: list[tuple[str, str]] = []
    if typ == "Choice":
        rules = raw.get("Choices")
        if not isinstance(rules, list) or not rules:
            raise AslError(json_path(path, "Choices"), "missing or empty",
                           'add "Choices": [{"Variable": ..., "Next": "<state>"}, ...]')
        for i, rule in enumerate(rules):
            rpath = json_path(path, "Choices", i)
            if not isinstance(rule, Mapping) or "Next" not in rule:
                raise AslError(json_path(rpath, "Next"), "missing", 'each Choice rule needs "Next": "<state>"')
            choices.append((_target(rule["Next"], json_path(rpath, "Next"), siblings), f"rule {i}"))
        if "Default" in raw:
            choices.append((_target(raw["Default"], json_path(path, "Default"), siblings), "Default"))
    catchers: list[Catcher] = []
    if "Catch" in raw:
        if typ not in ("Task", "Parallel", "Map"):
            raise AslError(json_path(path, "Catch"), f"a {typ} state takes no Catch",
                           "move it to a Task, Parallel or Map state")
        if not isinstance(raw["Catch"], list):
            raise AslError(json_path(path, "Catch"), "must be a list of catchers",
                           'write [{"ErrorEquals": ["States.ALL"], "Next": "<state>"}]')
        for i, c in enumerate(raw["Catch"]):
            cpath = json_path(path, "Catch", i)
            if not isinstance(c, Mapping) or "Next" not in c:
                raise AslError(json_path(cpath, "Next"), "missing", 'each catcher needs "Next": "<state>"')
            catchers.append(Catcher(i, _target(c["Next"], json_path(cpath, "Next"), siblings), c))
    branches: list[int] = []
    if typ == "Parallel":
        docs = raw.get("Branches")
        if not isinstance(docs, list) or not docs:
            raise AslError(json_path(path, "Branches"), "missing or empty",
                           'add "Branches": [{"StartAt": ..., "States": {...}}, ...]')
        for i, b in enumerate(docs):
            bpath = json_path(path, "Branches", i)
            if not isinstance(b, Mapping):
                raise AslError(bpath, "a branch must be an object", 'write {"StartAt": ..., "States": {...}}')
            branches.append(_machine(b, bpath, out, names, is_jsonata, owner=name, branch=i))
    processor: int | None = None
    distributed = False
    if typ == "Map":
        proc_key = "ItemProcessor" if "ItemProcessor" in raw else "Iterator" if "Iterator" in raw else None
        if proc_key is None:
            raise AslError(json_path(path, "ItemProcessor"), "missing",
                           'add "ItemProcessor": {"StartAt": ..., "States": {...}}')
        proc = raw[proc_key]
        if not isinstance(proc, Mapping):
            raise AslError(json_path(path, proc_key), "must be an object", 'write {"StartAt": ..., "States": {...}}')
        config = proc.get("ProcessorConfig")
        mode = config.get("Mode") if isinstance(config, Mapping) else None
        distributed = "ItemReader" in raw or mode == "DISTRIBUTED"
        processor = _machine(proc, json_path(path, proc_key), out, names, is_jsonata, owner=name, branch=None)
    return State(name, cast(StateType, typ), path, raw, machine, nxt, end, tuple(choices), tuple(catchers),
                 tuple(branches), processor, distributed, is_jsonata)


def _check_reachable(m: Machine) -> None:
    seen = {m.start}
    todo = [m.start]
    while todo:
        st = m.states[todo.pop()]
        targets = [st.next] if st.next else []
        targets += [t for t, _ in st.choices] + [c.next for c in st.catchers]
        for t in targets:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    for name, st in m.states.items():
        if name not in seen:
            raise AslError(st.path, f"unreachable: no Next, Choice rule, Default or Catch leads to it from "
                                    f"StartAt {m.start!r}",
                           "point a transition at it or remove it")
