"""Run a state machine whose handlers use ``@sdk.offload`` on the embedded stack, under
moto's Step Functions interpreter (``funcsion offload run``).

What it does, as a deployment would: plans the definition and starts the execution's run
(``sdk.offload_start``: the workflow from the plan), creates the state machine and one
Lambda per ``FunctionName`` in moto, starts the execution named after the run with the
run in its input, and carries out each Lambda invoke on the local Lambda platform
(``LambdaBridge``): the Lambda ``<prefix>-<name>`` runs ``<module>:<name>`` (``-`` read as
``_``; first the whole name, then the part after the first ``-``). When the execution
ends it sends the cleanup Lambda (``sdk.offload_cleanup``) the EventBridge
"Step Functions Execution Status Change" event AWS would send (moto's EventBridge does
not emit them), then saves the run's report (``funcsion runs``, ``funcsion report``):
per object, the state that wrote it, its bytes, when it was freed and by whom (its last
reader's commit, or the cleanup at the end), what was kept until the end and why, and
the execution's intermediate-data cost (task Lambdas, storage functions, COS requests
and storage: ``sdk.local._cost``).

Not here: the decorator (``sdk._offload``), the plan's workflow (``sdk._offload_plan``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import asl_plan
from .._offload_plan import StateLayout, execution_input, layout, start_run
from .sfn_local import HandlerError, LambdaBridge

__all__ = ["CLEANUP_LAMBDA", "MOTO_CONFIG", "OffloadRun", "lambda_names", "run_local"]

#: moto's settings: run the ASL, and a Lambda without Docker (the bridge answers the invokes)
MOTO_CONFIG: dict[str, Any] = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
CLEANUP_LAMBDA = "funcsion-offload-cleanup"
#: smaller than any offloaded value (the least threshold is 1 KiB): a state's commit marker
MIN_OFFLOADED = 1024
_REGION = "us-east-1"


@dataclass
class OffloadRun:
    """One execution: its run, status, history events, the invokes it made and its report."""

    run_id: str
    execution_arn: str
    status: str
    events: list[dict[str, Any]]
    calls: list[tuple[str, dict[str, Any]]]
    cleanup: dict[str, Any]
    report: dict[str, Any] = field(default_factory=dict)
    saved_to: str | None = None


def lambda_names(definition: Mapping[str, Any] | asl_plan.Definition) -> dict[str, str]:
    """Task state -> the Lambda function name it invokes (``lambda:invoke``'s
    ``FunctionName``, or a Lambda ARN as ``Resource``)."""
    d = definition if isinstance(definition, asl_plan.Definition) else asl_plan.parse(definition)
    out: dict[str, str] = {}
    for st in d.states():
        if st.type != "Task":
            continue
        ref = st.raw.get("Resource", "")
        params = st.raw.get("Parameters") or st.raw.get("Arguments") or {}
        if isinstance(params, Mapping) and isinstance(params.get("FunctionName"), str):
            ref = params["FunctionName"]
        ref = str(ref)
        out[st.name] = ref.split(":function:", 1)[1].split(":", 1)[0] if ":function:" in ref else ref
    return out


def _handler_for(module: Any, lambda_name: str) -> str:
    names = [lambda_name.replace("-", "_")]
    if "-" in lambda_name:
        names.append(lambda_name.split("-", 1)[1].replace("-", "_"))
    for n in names:
        if callable(getattr(module, n, None)):
            return n
    raise ValueError(f"no handler for Lambda {lambda_name!r} in {module.__file__}: define {' or '.join(names)}")


def run_local(asl: str | Path, stack: Any, *, code_dir: str | Path, module: str = "handlers",
              execution_input_doc: Mapping[str, Any] | None = None, app: str | None = None,
              timeout_s: float = 300.0, threshold_bytes: int | None = None, save: bool = True,
              invoker: Callable[[str, dict[str, Any]], Any] | None = None) -> OffloadRun:
    """Run the state machine in file ``asl`` once on ``stack`` (an ``sdk.local.Stack``) with
    the handlers of ``<code_dir>/<module>.py`` (see the module docstring). ``invoker``:
    what carries out each Lambda invoke (``name, payload -> result``; raising
    ``HandlerError`` for a handler's error) instead of the local Lambda platform, the
    cleanup Lambda ``CLEANUP_LAMBDA`` included (e.g. the task zip in a bare interpreter)."""
    import importlib.util

    import boto3
    from moto import mock_aws

    from storage_functions.exceptions import InvocationFailed
    from storage_functions.local import LocalPlatform, PlatformConfig

    text = Path(asl).read_text(encoding="utf-8")
    plan = asl_plan.plan(text)
    app = app or Path(asl).name.split(".")[0].replace("_", "-")
    names = lambda_names(plan.definition)
    spec = importlib.util.spec_from_file_location(f"_offload_{module}", Path(code_dir) / f"{module}.py")
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {Path(code_dir) / f'{module}.py'}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    env = {"FUNCSION_OFFLOAD_THRESHOLD_BYTES": str(threshold_bytes)} if threshold_bytes else {}
    platform = LocalPlatform(PlatformConfig(idle_reclaim_s=(600.0, 1200.0))) if invoker is None else None
    try:
        if platform is not None:
            for lam in sorted(set(names.values())):
                platform.deploy(lam, f"{module}:{_handler_for(mod, lam)}", memory_mb=1024, timeout_s=120,
                                code_paths=[str(Path(code_dir).resolve())], env=env)
            platform.deploy(CLEANUP_LAMBDA, "sdk._offload_cleanup:handler", memory_mb=256, timeout_s=60)

        def invoke(name: str, payload: dict[str, Any]) -> Any:
            if invoker is not None:
                return invoker(name, payload)
            assert platform is not None
            try:
                return platform.invoke(name, payload)
            except InvocationFailed as exc:
                raise HandlerError(exc.error_type or exc.reason, exc.error_message or str(exc)) from None

        with mock_aws(config=MOTO_CONFIG), stack.client() as c:  # type: ignore[call-overload]
            iam = boto3.client("iam", region_name=_REGION)
            role = iam.create_role(RoleName=f"funcsion-offload-{app}", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
            lam_client = boto3.client("lambda", region_name=_REGION)
            for lam in sorted(set(names.values())):
                lam_client.create_function(FunctionName=lam, Runtime="python3.11", Role=role,
                                           Handler=f"{module}.x", Code={"ZipFile": _zip()})
            sfn = boto3.client("stepfunctions", region_name=_REGION)
            sm = sfn.create_state_machine(name=app, definition=text, roleArn=role)["stateMachineArn"]
            from ..local._cost import StoreSnapshot
            from ..local._run import _store_stats

            before = StoreSnapshot(stack, _store_stats(c.endpoints))
            started = time.time()
            run = start_run(c, text, app=app)
            try:
                with LambdaBridge(invoke) as bridge:
                    arn = sfn.start_execution(stateMachineArn=sm, name=run.run_id,
                                              input=json.dumps(execution_input(run, execution_input_doc, plan)))[
                        "executionArn"]
                    deadline = time.monotonic() + timeout_s
                    while (desc := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
                        if time.monotonic() > deadline:
                            sfn.stop_execution(executionArn=arn, error="funcsion.Timeout",
                                               cause=f"funcsion offload run: not done in {timeout_s:g} s")
                        time.sleep(0.05)  # moto's interpreter runs in its own thread; it has no event to wait on
                    events = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
                    held = {o.object_name: o for o in run.list()}
                    cleanup = invoke(CLEANUP_LAMBDA, status_change_event(desc))
                    calls = list(bridge.calls)
                summary: dict[str, Any] = next((r for r in c.metadata.stats()["runs"] if r["run_id"] == run.run_id), {})
            finally:
                run.close()
            after = StoreSnapshot(stack, _store_stats(c.endpoints))
        wall = time.time() - started
        out = OffloadRun(run.run_id, arn, str(desc["status"]), events, calls, cleanup)
        out.report = build_report(plan, app, out, held, summary, started, wall)
        out.report["cost"] = _cost(stack, out.report, summary, started, wall, before, after,
                                   platform.billing().to_dict() if platform is not None else {})
        if save:
            from ..local._report_store import save_report

            out.saved_to = str(save_report(stack.config.state_dir, out.report))
        return out
    finally:
        if platform is not None:
            platform.shutdown()


def _cost(stack: Any, report: Mapping[str, Any], summary: Mapping[str, Any], started: float, wall: float,
          before: Any, after: Any, billing: Mapping[str, Any]) -> dict[str, Any]:
    """The execution's intermediate-data cost account (``sdk.local._cost``): its task Lambdas'
    bills (the local platform's; none with an invoker), the storage functions it kept busy
    and the COS requests and storage of its objects (the daemon is shared: a concurrent
    execution's requests count in each)."""
    from ..local._cost import run_cost
    from ..local._run import _function_memory_mb

    rows = {n: {"size": o["bytes"], "written_at": o.get("written_at"), "freed_at": o.get("freed_at")}
            for n, o in report["objects"].items()}
    return run_cost(t0=started, t1=started + wall, billing=billing, before=before, after=after,
                    platform=getattr(stack, "platform", None), objects=rows,
                    peak_live_bytes=int(summary.get("peak_live_bytes") or 0),
                    function_memory_mb=_function_memory_mb(stack, stack.config))


def _zip() -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("handlers.py", "# the real code runs on the local Lambda platform\n")
    return buf.getvalue()


def status_change_event(desc: Mapping[str, Any]) -> dict[str, Any]:
    """The EventBridge event AWS sends when execution ``desc`` (``DescribeExecution``) ends."""
    def ms(v: Any) -> int | None:
        return int(v.timestamp() * 1000) if hasattr(v, "timestamp") else None

    return {"version": "0", "detail-type": "Step Functions Execution Status Change", "source": "aws.states",
            "region": _REGION, "resources": [desc["executionArn"]],
            "detail": {"executionArn": desc["executionArn"], "stateMachineArn": desc["stateMachineArn"],
                       "name": desc["name"], "status": desc["status"], "startDate": ms(desc.get("startDate")),
                       "stopDate": ms(desc.get("stopDate")), "input": desc.get("input"),
                       "output": desc.get("output")}}


def _why(marker: bool, sl: StateLayout | None, freed: bool) -> str:
    if marker:
        return "a commit marker: the state offloaded nothing, so no reference names it; its write committed its reads"
    if sl is None:
        return "written in a Map iteration (the run's client): kept until the execution ends"
    if freed or not sl.declared_readers:
        return sl.why
    return (f"its declared reader(s) {', '.join(sl.declared_readers)} did not all commit on this execution's route "
            "(a Catch, a failure), so it was kept until the execution ended")


def build_report(plan: asl_plan.Plan, app: str, ex: OffloadRun, objects: Mapping[str, Any],
                 summary: Mapping[str, Any], started: float, wall_s: float) -> dict[str, Any]:
    """The run's report: a ``funcsion report`` document with an ``offload`` section."""
    lay = layout(plan)
    state_of = {sl.function: name for name, sl in lay.items()}
    t0 = float(summary.get("started") or 0.0)
    entered: dict[str, int] = {}
    for e in ex.events:
        if e["type"] == "TaskStateEntered":
            n = e["stateEnteredEventDetails"]["name"]
            entered[n] = entered.get(n, 0) + 1
    ended_by = f"the cleanup at the execution's end ({ex.status})"
    rows: dict[str, Any] = {}
    for name, o in objects.items():
        if o.state in ("pending", "allocated", "missing"):
            continue  # declared, never written: the state did not finish
        writer = state_of.get(name.split(".", 1)[0], o.producer or "-")
        freed = o.state == "freed"
        by = [state_of.get(f, f) for f in o.committed_by]
        sl = lay.get(writer)
        marker = int(o.size) < MIN_OFFLOADED
        rows[name] = {"state": writer, "marker": marker, "bytes": int(o.size), "declared_reads": int(o.declared_reads),
                      "reads": by, "adhoc": bool(o.adhoc),
                      "written_at": round(o.readable_at - t0, 4) if o.readable_at and t0 else None,
                      "freed_at": round(o.freed_at - t0, 4) if freed and o.freed_at and t0 else None,
                      "freed_by": (by[-1] if by else o.freed_reason) if freed else ended_by,
                      "kept_until_end": not freed,
                      "why": _why(marker, sl, freed)}
    tasks = {n: {"state": "ran" if entered.get(n) else "skipped", "attempts": entered.get(n, 0)}
             for n in plan.states}
    left = {"live_bytes": summary.get("live_bytes"), "allocated_bytes": summary.get("allocated_bytes")}
    values = {n: r for n, r in rows.items() if not r["marker"]}
    return {"status": ex.status.lower(), "run_id": ex.run_id, "workflow": app, "kind": "offload",
            "policy": summary.get("policy"), "started": round(started, 3), "wall_s": round(wall_s, 3),
            "execution_arn": ex.execution_arn, "tasks": tasks, "objects": rows,
            "outputs": {}, "persisted": {},
            "memory": {"mb_s": summary.get("allocated_mb_s"), "peak_bytes": summary.get("peak_allocated_bytes"),
                       "left_after_cleanup": left},
            "offload": {"objects": len(values), "bytes": sum(r["bytes"] for r in values.values()),
                        "freed_by_readers": sorted(n for n, r in values.items() if not r["kept_until_end"]),
                        "kept_until_end": sorted(n for n, r in values.items() if r["kept_until_end"]),
                        "markers": sorted(n for n, r in rows.items() if r["marker"]),
                        "plan": {n: {"declared_readers": list(sl.declared_readers), "why": sl.why}
                                 for n, sl in lay.items()},
                        "cleanup": ex.cleanup},
            "plan": plan.to_dict()}

