"""Template expansion of the WDS function entries, within ``Limits``, and the
checks on the names it produces.

Expansion runs in two passes. ``_plan`` resolves every entry's replica count
and the size of each of its strings (``_templates.size``: the product of the
ranges, every format spec's width) without making a single name, and checks
them against the limits: functions per entry and per workflow, names per
template string, and names in all ``input``/``output``/``next`` lists (the
edges). Only a workflow within them is expanded, so a hostile file costs what
its text costs. The expanded object names are then checked as storage keys
(``object_name_problem``) and counted (``max_objects``), and the entries'
Lambda names for clashes (``lambda_clashes``). The graph checks that follow
are in ``_parse``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ._check import Checker, Entry, key_path
from ._lambda import LambdaSettings
from ._limits import Limits
from ._model import FunctionSpec
from ._names import (CLEANUP_ENTRY, LAMBDA_NAME_MAX, OBJECT_NAME_MAX, all_safe_object_names, lambda_clashes,
                     object_name_problem)
from ._templates import TemplateError, expand, has_index, param_name, resolve_count, size

__all__ = ["check_declared_inputs", "check_lambda_names", "expand_entries"]

_LISTS = ("input", "output", "next")
_NAME_FIX = (f"object names are storage keys: use letters, digits, '.', '_' and '-', not starting with '.', "
             f"without '..', at most {OBJECT_NAME_MAX} characters")


def _short(text: str, keep: int = 60) -> str:
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text):,} characters)"


def _raise_fix(name: str, what: str) -> str:
    setting = Limits.setting(name)
    return (f"{what}; if the workflow really is this large, raise {setting} in funcsion.toml "
            f"(or FUNCSION_{setting.upper()})")


def expand_entries(chk: Checker, entries: list[Entry], params: Mapping[str, int], limits: Limits,
                   declared_inputs: Iterable[str] = ()) -> list[FunctionSpec] | None:
    """Every function of the workflow, templates expanded; ``None`` after an issue."""
    plan = _plan(chk, entries, params, limits)
    if plan is None:
        return None
    width = limits.max_format_width
    out: list[FunctionSpec] = []
    n_before = len(chk.issues)
    for e, count in plan:
        doc = e.doc
        settings = e.lambda_settings or LambdaSettings()
        indices: list[int | None] = list(range(count)) if "replicas" in doc else [None]
        for idx in indices:
            try:
                name = expand(doc["name"], params, idx, allow_ranges=False, max_width=width)[0]
                lists = {key: [expand(item, params, idx, max_width=width) for item in doc[key]] for key in _LISTS}
            except TemplateError as exc:
                chk.add(e.path, exc.message, exc.fix)
                break
            if not _object_names_ok(chk, e, idx, lists):
                break
            flat = {key: [s for item in lists[key] for s in item] for key in _LISTS}
            out.append(FunctionSpec(
                name=name, stage_name=e.stage_name, stage_id=e.stage_id, start=doc["start"],
                input=tuple(dict.fromkeys(flat["input"])), output=tuple(flat["output"]),
                next=tuple(dict.fromkeys(flat["next"])), json_path=e.path,
                template=doc["name"] if idx is not None else None, replica=idx,
                handler=doc.get("handler"), lambda_settings=settings,
            ))
    if len(chk.issues) > n_before:
        return None
    objects = len(set(declared_inputs).union(*(f.input + f.output for f in out)))
    if objects > limits.max_objects:
        chk.add("$.spec", f"the workflow has {objects:,} objects, over the limit of {limits.max_objects:,} "
                "(wds_max_objects)", _raise_fix("max_objects", "use fewer or larger objects"))
        return None
    return out


def _plan(chk: Checker, entries: list[Entry], params: Mapping[str, int],
          limits: Limits) -> list[tuple[Entry, int]] | None:
    """(entry, replica count) for every entry, every count and size checked; ``None`` after an issue."""
    n_before = len(chk.issues)
    plan: list[tuple[Entry, int]] = []
    functions = edges = 0
    starved: dict[str, _Starved] = {}
    for e in entries:
        count = _replicas(chk, e, params, limits, starved)
        if count is None:
            continue
        names = 0
        ok = True
        for key in ("name", *_LISTS):
            items = [e.doc["name"]] if key == "name" else e.doc[key]
            for k, item in enumerate(items):
                path = key_path(e.path, key) + ("" if key == "name" else f"[{k}]")
                try:
                    n = size(item, params, allow_ranges=key != "name", max_width=limits.max_format_width)
                except TemplateError as exc:
                    if exc.starved is not None:  # said once per parameter, below
                        starved.setdefault(exc.starved[0], _Starved(exc.starved[1])).use(exc.starved[2], repr(item))
                    else:
                        chk.add(path, exc.message, exc.fix)
                    ok = False
                    continue
                if n > limits.max_range:
                    chk.add(path, f"{_short(item)!r} expands to {n:,} names, over the limit of {limits.max_range:,} "
                            "for one template string (wds_max_range)",
                            _raise_fix("max_range", "use fewer or shorter ranges"))
                    ok = False
                elif key != "name":
                    names += n
        if ok:
            plan.append((e, count))
            functions += count
            edges += count * names
    for name, st in starved.items():
        chk.add(key_path("$.params", name), st.message(name), f"give it a value of at least {st.least}, "
                f"with --param {name}=N or as its default in \"params\"")
    if len(chk.issues) > n_before:
        return None
    if functions > limits.max_functions:
        chk.add("$.spec", f"the workflow expands to {functions:,} functions, over the limit of "
                f"{limits.max_functions:,} (wds_max_functions); largest entries: {_largest(plan)}",
                _raise_fix("max_functions", "lower the replica counts"))
    if edges > limits.max_edges:
        chk.add("$.spec", f"the input, output and next lists of the workflow expand to {edges:,} names, over the "
                f"limit of {limits.max_edges:,} (wds_max_edges)",
                _raise_fix("max_edges", "use fewer replicas or shorter ranges"))
    return None if len(chk.issues) > n_before else plan


class _Starved:
    """A parameter whose value leaves replica counts or ranges that use it empty."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.least = 1
        self.uses: list[str] = []

    def use(self, least: int, what: str) -> None:
        self.least = max(self.least, least)
        self.uses.append(what)

    def message(self, name: str) -> str:
        shown = ", ".join(_short(u) for u in self.uses[:3])
        more = f" and {len(self.uses) - 3} more" if len(self.uses) > 3 else ""
        return (f"parameter {name!r} is {self.value}, which leaves nothing where the workflow uses it "
                f"({shown}{more})")


def _replicas(chk: Checker, e: Entry, params: Mapping[str, int], limits: Limits,
              starved: dict[str, _Starved] | None = None) -> int | None:
    doc = e.doc
    if "replicas" not in doc:
        return 1
    path = key_path(e.path, "replicas")
    try:
        count = resolve_count(doc["replicas"], params, "'replicas'")
    except TemplateError as exc:
        chk.add(path, exc.message, exc.fix)
        return None
    if count < 1:
        name = param_name(doc["replicas"], params)
        if name is not None and starved is not None:  # said once per parameter, by _plan
            starved.setdefault(name, _Starved(count)).use(1, f"'replicas' of {doc['name']!r}")
        else:
            chk.add(path, f"'replicas' is {count}; a function needs at least 1",
                    "raise the count, or remove the function")
        return None
    if count > limits.max_functions:
        chk.add(path, f"'replicas' is {count:,}, over the limit of {limits.max_functions:,} functions per workflow "
                "(wds_max_functions)", _raise_fix("max_functions", "lower the count"))
        return None
    if not has_index(doc["name"]):
        chk.add(key_path(e.path, "name"), f"replicated function {_short(doc['name'])!r} has no {{i}} in its name, "
                "so every replica would have the same name", f'write e.g. "{_short(doc["name"])}_{{i:02d}}"')
        return None
    return count


def _largest(plan: list[tuple[Entry, int]], n: int = 3) -> str:
    top = sorted(plan, key=lambda ec: -ec[1])[:n]
    return ", ".join(f"{_short(e.doc['name'])!r} ({c:,})" for e, c in top)


def _object_names_ok(chk: Checker, e: Entry, idx: int | None, lists: Mapping[str, list[list[str]]]) -> bool:
    """Report the first unsafe object name of this replica."""
    for key in ("input", "output"):
        for k, names in enumerate(lists[key]):
            if all_safe_object_names(names):
                continue
            for name in names:
                problem = object_name_problem(name)
                if problem is None:
                    continue
                where = f"{key_path(e.path, key)}[{k}]" + ("" if idx is None else f" (replica {idx})")
                chk.add(where, f"object name {_short(name)!r} {problem}", _NAME_FIX)
                return False
    return True


def check_declared_inputs(chk: Checker, names: list[str]) -> None:
    """The top-level ``inputs`` are object names too."""
    for k, name in enumerate(names):
        problem = object_name_problem(name)
        if problem is not None:
            chk.add(f"$.inputs[{k}]", f"object name {_short(name)!r} {problem}", _NAME_FIX)


def check_lambda_names(chk: Checker, app: str, functions: list[FunctionSpec]) -> None:
    """Every entry must get a Lambda of its own (``lambda_name`` is not one-to-one)."""
    room = LAMBDA_NAME_MAX - len(app) - 1
    if room < 1:
        chk.add("$.app", f"app name {_short(app)!r} is {len(app)} characters; Lambda names are '<app>-<entry>' cut "
                f"at {LAMBDA_NAME_MAX} characters, which leaves no room for the entry names",
                f"shorten the app name to at most {LAMBDA_NAME_MAX - 2} characters")
        return
    where: dict[str, str] = {}
    for f in functions:
        where.setdefault(f.entry, f.json_path)
    for first, second, name in lambda_clashes(app, where):
        if first == CLEANUP_ENTRY:
            chk.add(where[second], f"entry {_short(second)!r} maps to Lambda name {name!r}, which funcsion's cleanup "
                    f"task ({CLEANUP_ENTRY!r}) uses", "rename the entry")
        else:
            chk.add(where[second], f"entries {_short(first)!r} ({where[first]}) and {_short(second)!r} map to the same "
                    f"Lambda name {name!r}, so both would run one handler",
                    "rename one so that they differ in letters, digits, '_' or '-' (other characters become '-', "
                    f"templates are dropped and names are cut at {LAMBDA_NAME_MAX} characters)")
