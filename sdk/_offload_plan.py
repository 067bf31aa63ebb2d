"""The funcsion workflow of a Step Functions state machine, derived from its offload plan.

An execution of a state machine whose handlers use ``@sdk.offload`` is a funcsion run
of a workflow (WDS) made from ``sdk.asl_plan``'s plan, so its objects are freed at their
last reader's commit exactly like a WDS run's:

- every Task state is a function (``function_name``: the state name made a WDS name);
- a Task state whose result has a static read count, read by the same Task states on
  every route that succeeds (``Parallel``: all branches; a ``Catch`` route that reads it
  fewer times keeps it until the end), declares one output object, named like the
  function, that those states declare as input: the decorator stores the values it
  offloads from the result there (an empty marker when it offloads nothing: the write
  commits the state's reads), and the object's read count is the plan's;
- any other Task state (count null, 0, reaches the execution's output, readers that
  differ between routes, a reader inside a ``Map`` iteration) declares no output: its
  offloaded values are ad-hoc objects, kept until the execution ends (cleanup or TTL),
  and it commits its reads explicitly;
- a Task state inside a ``Map`` (``map_states``, named in the execution's input) runs
  once per item, and one function commits once: it runs as the run's client (its reads
  count for nothing) and each iteration's values are ad-hoc objects of their own;
- a Task state whose result is read once, by a Task state inside a Map (each item once:
  the planner's Map rule), hands its Map items (``sdk.offload_items``) over as chunks
  that the reading iteration frees when it returns (``map_items``, named in the
  execution's input too).

``start_run`` registers that workflow and starts the run; ``execution_input`` is the
``funcsion`` entry the execution's input carries (the run's tokens, never the admin
or store-wide token), read by each handler through ``"funcsion.$": "$$"``; the
execution must be named after the run (``run.run_id``), as ``sdk.deploy`` names them.

Pure but for ``start_run``/``start_execution`` (a client and a Step Functions client
passed in). Not here: the decorator (``sdk._offload``), cleanup (``sdk._offload_cleanup``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from graphlib import TopologicalSorter
from typing import Any

from . import asl_plan
from .asl_plan._flow import Walker

__all__ = ["StateLayout", "execution_input", "function_name", "layout", "map_items", "map_states", "start_execution",
           "start_run", "workflow_doc"]

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


def function_name(state: str) -> str:
    """The WDS function (and object) name of Task state ``state``: the name itself when it
    is one, else its letters, digits and ``_`` plus a hash of the whole name (unique)."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,59}", state):
        return state
    base = _NOT_IDENT.sub("_", state)[:40]
    if not base or base[0].isdigit():
        base = "s_" + base
    return f"{base}_{hashlib.blake2b(state.encode(), digest_size=4).hexdigest()}"


@dataclass(frozen=True, slots=True)
class StateLayout:
    """What the run declares for one Task state."""

    state: str
    function: str
    declared_readers: tuple[str, ...]  # Task states whose commit counts (empty: kept until the end)
    why: str


def layout(plan: asl_plan.Plan) -> dict[str, StateLayout]:
    """Per Task state, the readers the run declares (see the module docstring)."""
    d = plan.definition
    in_map = set(map_states(plan))
    out: dict[str, StateLayout] = {}
    for name, sp in plan.states.items():
        fn = function_name(name)
        if sp.read_count is None or sp.kept_until_end or not sp.read_count:
            out[name] = StateLayout(name, fn, (), f"kept until the execution ends: {sp.why}")
            continue
        if name in in_map:
            out[name] = StateLayout(name, fn, (), "kept until the execution ends: it runs once per Map item "
                                                  "(each iteration's values are objects of their own)")
            continue
        ok = [r for r in Walker(d, name).routes() if not r.error]
        sets = {frozenset(r.readers) for r in ok}
        merged = any(r.others for r in ok)
        readers = tuple(r for r in sp.readers if r in next(iter(sets))) if len(sets) == 1 else ()
        if merged or len(readers) != sp.read_count:
            out[name] = StateLayout(name, fn, (), "kept until the execution ends: the routes that succeed read it "
                                                  f"{sp.read_count} time(s) but not by the same Task states")
        elif in_map & set(readers):
            inner = sorted(in_map & set(readers))
            chunked = ""
            if name in map_items(plan):
                chunked = (f"; its Map items (sdk.offload_items) are chunks, each read once by its {inner[0]} "
                           "iteration and freed when that iteration returns")
            out[name] = StateLayout(name, fn, (), f"kept until the execution ends: {', '.join(inner)} read(s) it "
                                                  f"in each Map iteration{chunked}")
        else:
            out[name] = StateLayout(name, fn, readers, sp.why)
    return out


def workflow_doc(plan: asl_plan.Plan, app: str) -> dict[str, Any]:
    """The WDS document of the run: one function per Task state (a stage per level of the data
    flow), an output object for each state whose readers are declared."""
    lay = layout(plan)
    reads: dict[str, list[str]] = {n: [] for n in lay}
    for sl in lay.values():
        for r in sl.declared_readers:
            reads[r].append(sl.function)
    by_fn = {sl.function: name for name, sl in lay.items()}
    preds = {name: {by_fn[o] for o in reads[name]} for name in lay}
    order = list(TopologicalSorter(preds).static_order())
    depth: dict[str, int] = {}
    for name in order:
        depth[name] = max((depth[p] + 1 for p in preds[name]), default=0)
    spec: dict[str, Any] = {}
    for name in order:
        sl = lay[name]
        stage = spec.setdefault(f"level_{depth[name]}", {"stage_id": depth[name], "functions": []})
        stage["functions"].append({
            "start": not reads[name], "name": sl.function, "input": reads[name],
            "output": [sl.function] if sl.declared_readers else [],
            "next": [lay[r].function for r in sl.declared_readers]})
    return {"app": app, "workflow_id": 1, "category": "offload",
            "description": f"the offload plan of state machine {app}", "spec": spec}


def start_run(client: Any, definition: str | Mapping[str, Any], *, app: str = "offload", policy: str = "funcstore",
              ttl_s: float = 0) -> Any:
    """Register the workflow of ``definition``'s plan with the metadata server of
    ``client`` (a driver's ``sdk.Client``) and start a run of it; returns the run's client."""
    doc = workflow_doc(asl_plan.plan(definition), app)
    key = client.register_workflow(json.dumps(doc), {}, f"offload:{app}")
    return client.start_run(key, policy=policy, ttl_s=ttl_s)


def map_states(plan: asl_plan.Plan) -> list[str]:
    """The Task states that run once per item of a Map (``$$.Map`` is not visible inside an
    iteration, so the execution's input names them for the decorator)."""
    d = plan.definition
    return [n for n in plan.states if any(a.type == "Map" for a in d.ancestors(n))]


def map_items(plan: asl_plan.Plan) -> dict[str, str]:
    """Task state -> the Task state inside a Map that reads it, for each state whose result
    the plan counts read once, by that one state, each item by its own iteration (the
    planner's Map rule), and nothing after: the chunks of its ``sdk.offload_items`` lists
    are freed by the iteration that reads them, when it returns."""
    inner = set(map_states(plan))
    out: dict[str, str] = {}
    for name, sp in plan.states.items():
        if (sp.read_count == 1 and not sp.kept_until_end and len(sp.readers) == 1 and sp.readers[0] in inner
                and name not in inner):
            out[name] = sp.readers[0]
    return out


def execution_input(run: Any, execution_input: Mapping[str, Any] | None = None,
                    definition: str | Mapping[str, Any] | asl_plan.Plan | None = None) -> dict[str, Any]:
    """The execution's input: the caller's, with the run's ``funcsion`` entry (its endpoints
    with a run-scoped store token, its metadata token, and the states of ``definition``
    that run once per Map item, and who frees the chunks of Map items: ``map_items``) added."""
    if not run.run_id or not run.token:
        raise ValueError("execution_input needs a client bound to a run: use sdk.offload_start(...) first")
    doc = dict(execution_input or {})
    doc["funcsion"] = {**run.endpoints.for_run(run.run_id).to_dict(), "token": run.token}
    if definition is not None:
        p = definition if isinstance(definition, asl_plan.Plan) else asl_plan.plan(definition)
        if inner := map_states(p):
            doc["funcsion"]["map_states"] = inner
        if items := map_items(p):
            doc["funcsion"]["map_items"] = items
    return doc


def start_execution(sfn_client: Any, state_machine_arn: str, run: Any,
                    execution_input_doc: Mapping[str, Any] | None = None, *,
                    definition: str | Mapping[str, Any] | asl_plan.Plan | None = None) -> str:
    """Start ``state_machine_arn`` for ``run`` (named after it); returns the execution ARN.
    ``definition``: the state machine's (default: asked of Step Functions)."""
    if definition is None:
        definition = str(sfn_client.describe_state_machine(stateMachineArn=state_machine_arn)["definition"])
    resp = sfn_client.start_execution(stateMachineArn=state_machine_arn, name=run.run_id,
                                      input=json.dumps(execution_input(run, execution_input_doc, definition)))
    return str(resp["executionArn"])
