"""Amazon States Language for a workflow, generated from its HDAG.

Shape: one state per *level*, in stage order, where a stage whose functions
depend on each other (FuncStore Fig. 9's F4 -> F5) is split into levels by
its internal data flow. A level with one plain function is a Task; one
templated entry is a Pass (the replica names) followed by an INLINE Map with
``MaxConcurrency`` and an ``ItemSelector``; several entries run as branches of
a Parallel. Every task gets ``{"funcsion": <context>, "run_id":
$$.Execution.Name, "function": <name>}``; results are discarded
(``ResultPath: null``) so only references travel in the state (Step
Functions caps it at 256 KiB). Tasks carry AWS's recommended Lambda Retry
list, then a retrier with ``MaxAttempts: 0`` for the errors no retry can fix
(``sdk.exceptions.NON_RETRYABLE_ERRORS``: retriers apply first match first),
then ``States.TaskFailed`` for the rest (``MaxAttempts``: the entry's
``max_attempts`` less the first try, else ``AslOptions.task_retry_attempts``); every level has a Catch into a cleanup task
that ends the run (freeing all its objects) before the execution fails; a
final task ends the run on success.

Tokens: the execution input's ``funcsion`` context (``aws.execution_input``)
carries the run's tokens only, and a first Choice state fails the execution
before any task runs unless its ``store_token`` is a run token (``run:...``)
and it has no ``admin_token``: tasks and the cleanup task (which needs
nothing more: it reads the run's objects, writes ``outputs/<run_id>/`` and
ends the run with the run token; the daemon's frees come from the stack's
control loop) never see the store-wide or the admin token.

Pure: takes the HDAG and a function that maps a WDS entry to a Lambda ARN
(Lambda names come from ``wds.lambda_name``, re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import networkx as nx

from hdag import HDAG
from wds import lambda_name, lambda_prefix  # the one entry -> Lambda name mapping; validation checks it is 1:1

from ..exceptions import NON_RETRYABLE_ERRORS

__all__ = ["AslOptions", "build_asl", "lambda_name", "lambda_prefix", "levels", "LAMBDA_RETRY", "END_RUN", "CLEANUP",
           "FAILED", "CHECK_TOKENS", "TOKENS_REFUSED"]

#: AWS's recommended retry list for the lambda:invoke integration.
LAMBDA_RETRY: list[dict[str, Any]] = [
    {"ErrorEquals": ["Lambda.ClientExecutionTimeoutException", "Lambda.ServiceException",
                     "Lambda.AWSLambdaException", "Lambda.SdkClientException"],
     "IntervalSeconds": 1, "MaxAttempts": 3, "BackoffRate": 2, "JitterStrategy": "FULL"},
]


@dataclass(frozen=True)
class AslOptions:
    task_retry_attempts: int = 2
    task_retry_interval_s: int = 1
    max_concurrency: int = 0  # 0: no limit
    context_path: str = "$.funcsion"


def levels(h: HDAG) -> list[tuple[str, list[list[str]]]]:
    """[(state name, groups)], each group the functions of one WDS entry in that level."""
    fg = h.function_graph()
    out: list[tuple[str, list[list[str]]]] = []
    for _sid, stage_name, fns in h.stages():
        sub = fg.subgraph(fns)
        depth: dict[str, int] = {}
        for f in nx.topological_sort(sub):
            depth[f] = max((depth[p] + 1 for p in sub.predecessors(f)), default=0)
        n_levels = max(depth.values()) + 1
        for lvl in range(n_levels):
            groups: dict[str, list[str]] = {}
            for f in fns:
                if depth[f] == lvl:
                    info = h.functions[f]
                    groups.setdefault(info.template or f, []).append(f)
            name = stage_name if n_levels == 1 else f"{stage_name} ({lvl + 1} of {n_levels})"
            out.append((name[:80], list(groups.values())))
    return out


def _task(fn_expr: dict[str, str], arn: str, opts: AslOptions, retries: int, *, context: str | None = None,
          run_id: str = "$$.Execution.Name") -> dict[str, Any]:
    payload = {"funcsion.$": context or opts.context_path, "run_id.$": run_id, **fn_expr}
    retry = LAMBDA_RETRY + [{"ErrorEquals": list(NON_RETRYABLE_ERRORS), "MaxAttempts": 0},
                            {"ErrorEquals": ["States.TaskFailed"], "IntervalSeconds": opts.task_retry_interval_s,
                             "MaxAttempts": retries, "BackoffRate": 2}]
    return {
        "Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
        "Parameters": {"FunctionName": arn, "Payload": payload},
        "ResultPath": None, "Retry": retry, "End": True,
    }


def _item_state_name(state_name: str) -> str:
    """The Task inside a stage's Map: named after the stage, since the States Language wants
    state names unique across the whole state machine, nested ones included."""
    return f"{state_name}: task"[:80]


def _group_states(h: HDAG, group: list[str], arn_for: Callable[[str], str], opts: AslOptions,
                  state_name: str) -> tuple[str, dict[str, Any]]:
    """(entry state, states) for one entry's functions in one level; the last state has ``End``."""
    info = h.functions[group[0]]
    arn = arn_for(info.template or info.name)
    attempts = h.workflow.functions[info.name].lambda_settings.max_attempts  # the entry's, shared by its replicas
    retries = opts.task_retry_attempts if attempts is None else attempts - 1
    if info.template is None:
        return state_name, {state_name: _task({"function": info.name}, arn, opts, retries)}
    items_state = f"{state_name}: replicas"[:80]
    item_task = _task({"function.$": "$.function"}, arn, opts, retries, context="$.funcsion", run_id="$.run_id")
    item_state = _item_state_name(state_name)
    map_def: dict[str, Any] = {
        "Type": "Map",
        "ItemsPath": "$.fanout.items",
        "ItemSelector": {"funcsion.$": opts.context_path, "run_id.$": "$$.Execution.Name",
                         "function.$": "$$.Map.Item.Value"},
        "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, "StartAt": item_state, "States": {item_state: item_task}},
        "MaxConcurrency": opts.max_concurrency,
        "ResultPath": None,
        "End": True,
    }
    pass_def = {"Type": "Pass", "Result": {"items": list(group)}, "ResultPath": "$.fanout", "Next": state_name}
    return items_state, {items_state: pass_def, state_name: map_def}


def _end_task(cleanup_arn: str, opts: AslOptions, status: str, **extra: Any) -> dict[str, Any]:
    payload = {"funcsion.$": opts.context_path, "run_id.$": "$$.Execution.Name", "action": "end_run",
               "status": status, **extra}
    return {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
            "Parameters": {"FunctionName": cleanup_arn, "Payload": payload},
            "ResultPath": None, "Retry": LAMBDA_RETRY}


END_RUN, CLEANUP, FAILED = "funcsion: end run", "funcsion: clean up failed run", "funcsion: run failed"
CHECK_TOKENS, TOKENS_REFUSED = "funcsion: check run tokens", "funcsion: tokens refused"


def _token_check(opts: AslOptions, first: str) -> dict[str, Any]:
    """The first state: only a run-scoped store token and no admin token go on to the tasks."""
    store = f"{opts.context_path}.store_token"
    ok = {"And": [{"Variable": store, "IsPresent": True}, {"Variable": store, "IsString": True},
                  {"Variable": store, "StringMatches": "run:*"},
                  {"Not": {"Variable": f"{opts.context_path}.admin_token", "IsPresent": True}}],
          "Next": first}
    return {"Type": "Choice", "Choices": [ok], "Default": TOKENS_REFUSED}


def build_asl(h: HDAG, arn_for: Callable[[str], str], cleanup_arn: str,
              opts: AslOptions | None = None) -> dict[str, Any]:
    """The state machine definition (a dict; ``json.dumps`` it for AWS)."""
    opts = opts or AslOptions()
    catch = [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": CLEANUP}]
    built: list[tuple[str, dict[str, Any]]] = []
    for name, groups in levels(h):
        if len(groups) == 1:
            built.append(_group_states(h, groups[0], arn_for, opts, name))
        else:
            branches = []
            for g in groups:
                start, sub = _group_states(h, g, arn_for, opts, h.functions[g[0]].template or g[0])
                branches.append({"StartAt": start, "States": sub})
            built.append((name, {name: {"Type": "Parallel", "Branches": branches, "ResultPath": None,
                                        "End": True}}))
    states: dict[str, Any] = {}
    for k, (_, sub) in enumerate(built):
        nxt = built[k + 1][0] if k + 1 < len(built) else END_RUN
        for sdef in sub.values():
            if sdef.pop("End", False):
                sdef["Next"] = nxt
                sdef["Catch"] = catch
        states.update(sub)
    states[END_RUN] = {**_end_task(cleanup_arn, opts, "succeeded"), "End": True}
    states[CLEANUP] = {**_end_task(cleanup_arn, opts, "failed", **{"error.$": "$.error"}), "Next": FAILED}
    states[FAILED] = {"Type": "Fail", "Error": "funcsion.RunFailed",
                      "Cause": "a task failed after its retries; the run was ended and its objects freed"}
    states[CHECK_TOKENS] = _token_check(opts, built[0][0])
    states[TOKENS_REFUSED] = {
        "Type": "Fail", "Error": "funcsion.TokensRefused",
        "Cause": "the execution input must carry the run's tokens only (a run-scoped store_token, no "
                 "admin_token); start executions with sdk.deploy.start_execution"}
    return {
        "Comment": f"funcsion workflow {h.key} ({len(h.functions)} functions), generated from its HDAG",
        "StartAt": CHECK_TOKENS,
        "States": states,
    }
