"""The task zip of ``funcsion offload deploy`` tested as it deploys: ``offload_bundle`` builds
it (the code the AWS path runs), and each Lambda the template configures runs it alone in a bare
interpreter (``python -I -S``) with the handler the template names, a layer directory holding
only ``TASK_LAYER_PACKAGES`` and their dependencies, plus boto3 (Lambda's runtime ships it).
The example's state machine runs under moto's ASL interpreter (``run_local`` with the zip's
Lambdas as its invoker, the status cleanup included): the 1 MB result is offloaded and freed
at its reader's commit, the cleanup from the zip ends the run, nothing is left, and every
first-party module the Lambdas imported came from the zip."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sdk.deploy._offload_stack import offload_bundle
from sdk.deploy._zip import TASK_LAYER_PACKAGES
from sdk.deploy.offload_local import CLEANUP_LAMBDA, run_local
from sdk.deploy.sfn_local import HandlerError
from sdk.local._stack import Stack
from storage_functions.exceptions import InvocationFailed
from tests.functional._bare_lambda import LAMBDA_RUNTIME_PACKAGES, ZipInvoker, failures, package_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "offload"

pytestmark = pytest.mark.slow


def test_offload_task_zip_as_deployed_runs_the_example_and_its_cleanup(stack: Stack, tmp_path: Path) -> None:
    b = offload_bundle(EXAMPLES / "large_result.asl.json", EXAMPLES / "handlers.py")
    zip_path = tmp_path / "task.zip"
    zip_path.write_bytes(b.task_zip)
    layer = package_dir(tmp_path / "layer", *TASK_LAYER_PACKAGES)
    runtime = package_dir(tmp_path / "runtime", *LAMBDA_RUNTIME_PACKAGES)
    res = b.template["Resources"]
    handlers = {r["Properties"]["FunctionName"]: r["Properties"]["Handler"] for k, r in res.items()
                if r["Type"] == "AWS::Lambda::Function" and (k.startswith("Task") or k == "StatusCleanup")}
    cleanup = res["StatusCleanup"]["Properties"]["FunctionName"]
    invokers = {name: ZipInvoker(zip_path, h, paths=(layer, runtime), env={}, log_dir=tmp_path, memory_mb=1024)
                for name, h in handlers.items()}

    def invoke(name: str, payload: dict[str, Any]) -> Any:
        target = cleanup if name == CLEANUP_LAMBDA else name
        try:
            return invokers[target].invoke(target, payload)
        except InvocationFailed as exc:
            raise HandlerError(exc.error_type or exc.reason, exc.error_message or str(exc)) from None

    try:
        out = run_local(EXAMPLES / "large_result.asl.json", stack, code_dir=EXAMPLES,
                        execution_input_doc={"size_mb": 1}, invoker=invoke, save=False)
    finally:
        for inv in invokers.values():
            inv.close()
    outcomes = [o for inv in invokers.values() for o in inv.outcomes]
    assert not failures(outcomes), failures(outcomes)
    assert out.status == "SUCCEEDED", [e for e in out.events if "Failed" in e["type"]]
    assert out.report["offload"]["freed_by_readers"] == ["Produce"]
    assert out.cleanup["ended"] is True
    with stack.client() as c:
        summary = next(r for r in c.metadata.stats()["runs"] if r["run_id"] == out.run_id)
    assert summary["state"] == "ended" and summary["live_bytes"] == 0 and summary["allocated_bytes"] == 0
    used: dict[str, str] = {}
    for _, r in outcomes:
        if r is not None:
            used.update(r["modules"])
    outside = {m: f for m, f in used.items() if not f.startswith(str(zip_path) + os.sep)}
    assert not outside, f"imported from outside the zip: {outside}"
    assert {"handlers", "sdk._offload", "sdk._offload_cleanup"} <= set(used)
