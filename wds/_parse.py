"""Parse and validate a WDS file into a ``Workflow``.

Every problem is collected as an ``Issue`` (file, JSON path, message, fix) and
raised together in one ``WDSValidationError``: a user fixes a file in one pass,
not one error per run. The raw text is checked against ``Limits`` first (size,
JSON nesting) so ``json.loads`` never sees a hostile document; then shapes;
then expansion within the limits (``_expand``); the graph checks (writers,
readers, ``next``, stages, cycles) run on the template-expanded functions of
the entries whose shape was sound.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._check import IDENT, Checker, Entry, key_path, type_name
from ._lambda import LAMBDA_KEYS, check_lambda_settings
from ._expand import check_declared_inputs, check_lambda_names, expand_entries
from ._limits import JSONNumberTooLong, Limits, json_int, nesting_exceeds, too_large
from ._model import FunctionSpec, Stage, Workflow
from .exceptions import Issue, WDSValidationError

__all__ = ["load", "loads", "read_text", "validate"]

_TOP_KEYS = {"app", "workflow_id", "category", "spec", "inputs", "params", "description"}
_STAGE_KEYS = {"stage_id", "functions"}
_FUNC_KEYS = {"start", "name", "input", "output", "next", "replicas", "handler", *LAMBDA_KEYS}
_HANDLER = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _no_duplicate_keys(source: str, sink: list[Issue]) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                sink.append(Issue(source, "$", f"key {k!r} appears twice in one JSON object; the second hides the first",
                                  "rename or merge the two entries"))
            out[k] = v
        return out
    return hook


def validate(text: str, *, source: str = "<string>", params: Mapping[str, int] | None = None,
             limits: Limits | None = None) -> tuple[Workflow | None, list[Issue]]:
    """Return the workflow (or ``None``) and every issue found, within ``limits`` (default ``Limits()``)."""
    limits = limits or Limits()
    chk = Checker(source)
    refused = _refuse_text(text, limits)
    if refused is not None:
        return None, [Issue(source, "$", *refused)]
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicate_keys(source, chk.issues), parse_int=json_int)
    except json.JSONDecodeError as exc:
        return None, [Issue(source, "$", f"malformed JSON: {exc.msg}",
                            "check for a missing comma, quote or bracket near that position",
                            line=exc.lineno, column=exc.colno)]
    except JSONNumberTooLong as exc:
        return None, [Issue(source, "$", f"{exc}", "write counts and ids as ordinary whole numbers")]
    except RecursionError:
        return None, [Issue(source, "$", *_too_deep(limits))]
    if not isinstance(doc, dict):
        chk.add("$", f"the document must be a JSON object, not {type_name(doc)}",
                'start with {"app": ..., "workflow_id": ..., "category": ..., "spec": {...}}')
        return None, chk.issues
    chk.unknown_keys(doc, _TOP_KEYS, "$")
    app = chk.field(doc, "app", "$", str, "a string", '"app": "word-count"')
    wid = chk.field(doc, "workflow_id", "$", (int, str), "a number or a string",
                    '"workflow_id": 1 (the workflow\'s version: runs, reports and the state machine name it '
                    '<app>/<workflow_id>; registering the same id again replaces it)')
    category = chk.field(doc, "category", "$", str, "a string",
                         '"category": "analytics" (a label for the kind of workflow: lifetime models are trained per '
                         'category)')
    spec = chk.field(doc, "spec", "$", dict, "an object of named stages", '"spec": {"map_stage": {...}}')
    declared_inputs = chk.string_list(doc, "inputs", "$") if "inputs" in doc else []
    merged = _params(chk, doc, params or {})
    if declared_inputs:
        check_declared_inputs(chk, declared_inputs)
    entries = _stage_entries(chk, spec) if spec is not None else []
    functions = expand_entries(chk, entries, merged, limits, declared_inputs or ())
    if spec is not None and functions is not None:
        if app is not None:
            check_lambda_names(chk, app, functions)
        _graph_checks(chk, functions, declared_inputs or [])
    if chk.issues or spec is None or functions is None:
        return None, chk.issues
    stages: dict[str, list[FunctionSpec]] = {}
    for f in functions:
        stages.setdefault(f.stage_name, []).append(f)
    ordered = sorted(stages.items(), key=lambda kv: kv[1][0].stage_id)
    wf = Workflow(
        app=app, workflow_id=wid, category=category,
        stages=tuple(Stage(name, fs[0].stage_id, tuple(fs)) for name, fs in ordered),
        inputs=tuple(_workflow_inputs(functions, declared_inputs or [])),
        params=dict(merged), source=source, warnings=tuple(chk.warnings),
    )
    return wf, []


def _too_deep(limits: Limits) -> tuple[str, str]:
    return (f"the JSON nests objects and arrays more than {limits.max_depth} levels deep (wds_max_depth)",
            "a WDS is a few levels deep: check for runaway brackets")


def _too_large(limits: Limits) -> tuple[str, str]:
    return (f"the workflow description is larger than the limit of {limits.max_bytes:,} bytes (wds_max_bytes)",
            "a WDS describes functions with templates, not data; if it really is this large, raise "
            "wds_max_bytes in funcsion.toml (or FUNCSION_WDS_MAX_BYTES)")


def _refuse_text(text: str, limits: Limits) -> tuple[str, str] | None:
    """(message, fix) when the text is too large or too deeply nested to parse at all."""
    if too_large(text, limits.max_bytes):
        return _too_large(limits)
    if nesting_exceeds(text, limits.max_depth):
        return _too_deep(limits)
    return None


def _params(chk: Checker, doc: Mapping[str, Any], overrides: Mapping[str, int]) -> dict[str, int]:
    declared = doc.get("params", {})
    out: dict[str, int] = {}
    if not isinstance(declared, dict):
        chk.add("$.params", f"'params' must be an object of name -> whole number, not {type_name(declared)}",
                'write e.g. "params": {"mappers": 4}')
        declared = {}
    for name, value in declared.items():
        if not IDENT.match(name):
            chk.add(key_path("$.params", name), f"parameter name {name!r} is not an identifier",
                    "use letters, digits and underscores")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            chk.add(key_path("$.params", name), f"parameter {name!r} must be a whole number >= 0, not {value!r}",
                    f'write e.g. "{name}": 4')
        else:
            out[name] = value
    for name, value in overrides.items():
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            chk.add("$.params", f"parameter {name!r} was given at run time but the file does not declare it "
                    f"(declared: {known})", f'declare it in "params" with a default, e.g. "{name}": 1')
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            chk.add(key_path("$.params", name), f"run-time value of {name!r} must be a whole number >= 0, not {value!r}",
                    f"pass --param {name}=4")
        else:
            out[name] = value
    return out


def _stage_entries(chk: Checker, spec: Mapping[str, Any]) -> list[Entry]:
    entries: list[Entry] = []
    seen_ids: dict[int, str] = {}
    if not spec:
        chk.add("$.spec", "'spec' has no stages", 'add a stage: "spec": {"stage_1": {"stage_id": 1, "functions": [...]}}')
    for stage_name, stage in spec.items():
        spath = key_path("$.spec", stage_name)
        if not isinstance(stage, dict):
            chk.add(spath, f"stage {stage_name!r} must be an object, not {type_name(stage)}",
                    'write {"stage_id": 1, "functions": [...]}')
            continue
        chk.unknown_keys(stage, _STAGE_KEYS, spath)
        sid = chk.field(stage, "stage_id", spath, int, "a whole number", '"stage_id": 1')
        if sid is not None:
            if sid < 0:
                chk.add(key_path(spath, "stage_id"), f"stage_id must be >= 0, not {sid}", "number stages 0, 1, 2, ...")
            elif sid in seen_ids:
                chk.add(key_path(spath, "stage_id"), f"stage_id {sid} is already used by stage {seen_ids[sid]!r}",
                        "give every stage its own stage_id")
            seen_ids.setdefault(sid, stage_name)
        funcs = chk.field(stage, "functions", spath, list, "an array of function entries",
                          '"functions": [{"start": true, "name": ..., "input": [], "output": [], "next": []}]')
        if funcs is not None and not funcs:
            chk.add(key_path(spath, "functions"), f"stage {stage_name!r} has no functions",
                    "add a function or remove the stage")
        for k, fdoc in enumerate(funcs or []):
            fpath = f"{key_path(spath, 'functions')}[{k}]"
            if not isinstance(fdoc, dict):
                chk.add(fpath, f"a function entry must be an object, not {type_name(fdoc)}",
                        'write {"start": false, "name": "f", "input": [...], "output": [...], "next": [...]}')
                continue
            chk.unknown_keys(fdoc, _FUNC_KEYS, fpath)
            n_before = len(chk.issues)
            chk.field(fdoc, "name", fpath, str, "a string", '"name": "mapper_{i}"')
            chk.field(fdoc, "start", fpath, bool, "true or false", '"start": false')
            for key in ("input", "output", "next"):
                chk.string_list(fdoc, key, fpath)
            handler = chk.field(fdoc, "handler", fpath, str, 'a "module:function" string',
                                '"handler": "handlers:mapper"', required=False)
            if handler is not None and not _HANDLER.match(handler):
                chk.add(key_path(fpath, "handler"), f"handler {handler!r} is not of the form module:function",
                        'write e.g. "handlers:mapper" (a module importable next to the WDS file)')
            if isinstance(fdoc.get("name"), str) and not fdoc["name"]:
                chk.add(key_path(fpath, "name"), "function name is empty", "give the function a name")
            # a bad Lambda setting is reported, but does not keep the entry out of the graph checks
            shape_ok = len(chk.issues) == n_before
            settings = check_lambda_settings(chk, fdoc, fpath)
            if shape_ok and sid is not None:
                entries.append(Entry(fpath, stage_name, sid, fdoc, settings))
    return entries


def _where(f: FunctionSpec) -> str:
    return f.json_path if f.replica is None else f"{f.json_path} (replica {f.replica}: {f.name})"


def _graph_checks(chk: Checker, functions: list[FunctionSpec], declared_inputs: list[str]) -> None:
    by_name: dict[str, FunctionSpec] = {}
    for f in functions:
        if f.name in by_name:
            chk.add(_where(f), f"function name {f.name!r} is used twice (first at {_where(by_name[f.name])})",
                    "give every function its own name")
        else:
            by_name[f.name] = f
    writer: dict[str, FunctionSpec] = {}
    for f in functions:
        for obj in f.output:
            if obj in writer:
                other = writer[obj]
                msg = (f"function {f.name!r} lists output {obj!r} twice" if other is f else
                       f"object {obj!r} is written by two functions: {other.name!r} and {f.name!r}")
                chk.add(_where(f), msg, "every object has exactly one writer; rename one of the outputs")
            else:
                writer[obj] = f
    if functions and not any(f.start for f in functions):  # no function at all is said where it happened
        chk.add("$.spec", "no function has \"start\": true, so nothing would run first",
                'mark the first function(s) with "start": true')
    starts_read = {obj for f in functions if f.start for obj in f.input}
    declared = set(declared_inputs)
    for obj in declared_inputs:
        if obj in writer:
            chk.add("$.inputs", f"{obj!r} is declared a workflow input, but function {writer[obj].name!r} writes it",
                    "remove it from inputs, or rename the output")
    for f in functions:
        for obj in f.input:
            w = writer.get(obj)
            if w is None:
                if obj not in starts_read and obj not in declared:
                    chk.add(_where(f), f"function {f.name!r} reads {obj!r}, which no function writes and which is "
                            "not a workflow input", f'add {obj!r} to a function\'s "output", or to the top-level '
                            f'"inputs" list if the client uploads it')
                continue
            if w is f:
                chk.add(_where(f), f"function {f.name!r} reads its own output {obj!r} (a cycle)",
                        "a function cannot read what it writes; split it in two")
            elif f.start:
                chk.add(_where(f), f"start function {f.name!r} reads {obj!r}, which {w.name!r} writes; a start "
                        "function runs before every other", f'set "start": false on {f.name!r}, or read a workflow input')
            elif f.stage_id < w.stage_id:
                chk.add(_where(f), f"function {f.name!r} (stage {f.stage_id}) reads {obj!r}, written in a later "
                        f"stage by {w.name!r} (stage {w.stage_id})",
                        "a reader must be in the same or a later stage than the writer; move one of them")
    data_succ: dict[str, set[str]] = {name: set() for name in by_name}
    for f in functions:
        for obj in f.input:
            w = writer.get(obj)
            if w is not None and w is not f:
                data_succ[w.name].add(f.name)
    order = _DataOrder(data_succ)
    next_succ: dict[str, set[str]] = {name: set() for name in by_name}
    for f in functions:
        for k, target in enumerate(f.next):
            g = by_name.get(target)
            if g is None:
                close = difflib.get_close_matches(target, list(by_name), n=1, cutoff=0.5)
                chk.add(f"{f.json_path}.next[{k}]" if f.replica is None else _where(f),
                        f"next names unknown function {target!r}",
                        f"did you mean {close[0]!r}?" if close else "name a function defined in spec")
            elif g is f:
                chk.add(_where(f), f"function {f.name!r} lists itself in next", "remove it from next")
            elif g.start:
                chk.add(_where(f), f"next edge {f.name!r} -> {target!r} leads into a start function",
                        f'remove it, or set "start": false on {target!r}')
            elif g.stage_id < f.stage_id:
                chk.add(_where(f), f"next edge {f.name!r} (stage {f.stage_id}) -> {target!r} (stage {g.stage_id}) "
                        "points to an earlier stage", "next must point to the same or a later stage")
            elif order.precedes(g.name, f.name):
                chk.add(_where(f), f"next edge {f.name!r} -> {target!r} contradicts the data flow: {target!r} "
                        f"must run before {f.name!r} because {f.name!r} depends on what it writes",
                        f"remove {target!r} from the next list of {f.name!r}")
            else:
                next_succ[f.name].add(g.name)
    combined = {n: data_succ[n] | next_succ[n] for n in by_name}
    cycle = _find_cycle(combined)
    if cycle:
        chk.add("$.spec", "the workflow has a cycle: " + " -> ".join(cycle),
                "a workflow must be a DAG; break the cycle by removing an edge")
        return
    has_pred = {g for succ in combined.values() for g in succ}
    for f in functions:
        if not f.start and f.name not in has_pred:
            chk.add(_where(f), f"function {f.name!r} is not a start function and nothing leads to it (no next edge, "
                    "no object from another function)", 'set "start": true, or list it in a next array')
    for w_name, readers in data_succ.items():
        for r in sorted(readers - next_succ[w_name]):
            chk.warnings.append(f"{r!r} reads what {w_name!r} writes, but {w_name!r} does not list it in next; "
                                "the data flow orders them anyway")


class _DataOrder:
    """Answers "must g run before f?" on the data-flow graph with one bit test: every
    function's ancestors are a bitset (a Python int over topological indices) built in
    one topological pass. A per-query search instead costs O(functions) per ``next``
    edge, hours on a wide file within the limits; the bitsets take at most
    functions^2/8 bytes (12.5 MB at 10,000 functions)."""

    def __init__(self, succ: Mapping[str, set[str]]) -> None:
        indeg = {n: 0 for n in succ}
        for bs in succ.values():
            for b in bs:
                indeg[b] += 1
        ready = [n for n, d in indeg.items() if d == 0]
        self.index: dict[str, int] = {}
        self.ancestors: dict[str, int] = dict.fromkeys(succ, 0)
        while ready:
            n = ready.pop()
            self.index[n] = len(self.index)
            mine = self.ancestors[n] | (1 << self.index[n])
            for b in succ[n]:
                self.ancestors[b] |= mine
                indeg[b] -= 1
                if indeg[b] == 0:
                    ready.append(b)
        self.acyclic = len(self.index) == len(succ)

    def precedes(self, g: str, f: str) -> bool:
        return self.acyclic and bool(self.ancestors[f] >> self.index[g] & 1)


def _find_cycle(succ: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle as a list of names (first name repeated at the end), or None."""
    white, grey, black = 0, 1, 2
    color = {n: white for n in succ}
    parent: dict[str, str] = {}
    for root in succ:
        if color[root] != white:
            continue
        stack = [(root, iter(sorted(succ[root])))]
        color[root] = grey
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = black
                stack.pop()
                continue
            if color[nxt] == grey:
                path = [node]
                while path[-1] != nxt:
                    path.append(parent[path[-1]])
                return list(reversed(path)) + [nxt]
            if color[nxt] == white:
                parent[nxt] = node
                color[nxt] = grey
                stack.append((nxt, iter(sorted(succ[nxt]))))
    return None


def _workflow_inputs(functions: list[FunctionSpec], declared: list[str]) -> list[str]:
    written = {o for f in functions for o in f.output}
    out = dict.fromkeys(declared)
    for f in functions:
        for obj in f.input:
            if obj not in written:
                out[obj] = None
    return list(out)


def loads(text: str, *, source: str = "<string>", params: Mapping[str, int] | None = None,
          limits: Limits | None = None) -> Workflow:
    """Parse WDS text; raise ``WDSValidationError`` carrying every issue."""
    wf, issues = validate(text, source=source, params=params, limits=limits)
    if wf is None:
        raise WDSValidationError(issues)
    return wf


def read_text(path: str | Path, limits: Limits | None = None) -> str:
    """The text of a WDS file, read no further than ``limits.max_bytes`` (a FIFO or a
    multi-gigabyte file costs no more than that); problems raise ``WDSValidationError``."""
    limits = limits or Limits()
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = fh.read(limits.max_bytes + 1)
        if len(data) > limits.max_bytes:
            raise WDSValidationError([Issue(str(p), "$", *_too_large(limits))])
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise WDSValidationError([Issue(str(p), "$", f"cannot read the file: {reason}",
                                        "check the path and that it is a UTF-8 JSON file")]) from None


def load(path: str | Path, *, params: Mapping[str, int] | None = None, limits: Limits | None = None) -> Workflow:
    """Read and parse a WDS file; unreadable files are reported as issues too."""
    return loads(read_text(path, limits), source=str(Path(path)), params=params, limits=limits)
