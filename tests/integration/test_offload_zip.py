"""``@sdk.offload`` handlers from the task zip, as they deploy: each Lambda of the
large_result example (and the status cleanup) runs the zip ``build_task_zip`` makes in a
bare interpreter (``python -I -S``) with only the task layer's packages and Lambda's
runtime ones, under moto's Step Functions (``run_local(invoker=...)``), against the real
embedded stack: the 2 MB result is freed at Consume's commit and the cleanup from the
zip ends the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sdk.deploy._zip import TASK_LAYER_PACKAGES, build_task_zip
from sdk.deploy.offload_local import CLEANUP_LAMBDA, run_local
from sdk.deploy.sfn_local import HandlerError
from sdk.local._stack import Stack
from storage_functions.exceptions import InvocationFailed
from tests.functional._bare_lambda import LAMBDA_RUNTIME_PACKAGES, ZipInvoker, failures, package_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "offload"

pytestmark = pytest.mark.slow


def test_offload_handlers_run_from_the_task_zip(stack: Stack, tmp_path: Path) -> None:
    handlers = {"offload-produce": "handlers.produce", "offload-consume": "handlers.consume",
                CLEANUP_LAMBDA: "sdk._offload_cleanup.handler"}
    zip_path = tmp_path / "task.zip"
    zip_path.write_bytes(build_task_zip(EXAMPLES, handlers.values()))
    layer = package_dir(tmp_path / "layer", *TASK_LAYER_PACKAGES)
    runtime = package_dir(tmp_path / "runtime", *LAMBDA_RUNTIME_PACKAGES)
    invokers = {n: ZipInvoker(zip_path, h, paths=(layer, runtime), env={}, log_dir=tmp_path)
                for n, h in handlers.items()}

    def invoke(name: str, payload: dict[str, Any]) -> Any:
        try:
            return invokers[name].invoke(name, payload)
        except InvocationFailed as exc:
            raise HandlerError(exc.error_type or exc.reason, exc.error_message or str(exc)) from None

    try:
        out = run_local(EXAMPLES / "large_result.asl.json", stack, code_dir=EXAMPLES,
                        execution_input_doc={"size_mb": 2}, invoker=invoke, save=False)
    finally:
        for inv in invokers.values():
            inv.close()
    assert out.status == "SUCCEEDED", [e for e in out.events if "Failed" in e["type"]]
    assert out.report["objects"]["Produce"]["freed_by"] == "Consume"
    assert out.cleanup["ended"] is True and out.report["memory"]["left_after_cleanup"] == {
        "live_bytes": 0, "allocated_bytes": 0}
    outcomes = [o for inv in invokers.values() for o in inv.outcomes]
    assert not failures(outcomes), failures(outcomes)
