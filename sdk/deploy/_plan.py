"""A workflow's task Lambdas as plain data, decided without touching AWS: one
Lambda per WDS entry plus the cleanup Lambda (names, handlers, settings), the
task zip, and the Step Functions definition once the Lambdas' ARNs are known.
Tests that create the Lambdas in moto and run the generated state machine use
it; a deployment is one CloudFormation stack (``sdk.deploy._stack``, whose
template ``sdk.deploy._template`` renders from the same HDAG and zips).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hdag
import wds

from ._zip import build_task_zip
from ._template import CLEANUP_HANDLER
from .asl import AslOptions, build_asl, lambda_name

__all__ = ["FunctionPlan", "WorkflowPlan", "plan_workflow", "CLEANUP_HANDLER"]


@dataclass(frozen=True)
class FunctionPlan:
    entry: str  # the WDS entry (``mapper_{i:02d}``) or the cleanup entry
    name: str  # the Lambda's name
    config: dict[str, Any]  # what create/update_function_configuration gets (Role, Handler, ...)


@dataclass(frozen=True)
class WorkflowPlan:
    graph: hdag.HDAG
    functions: list[FunctionPlan]
    state_machine_name: str
    zip: bytes
    asl_options: AslOptions

    @property
    def workflow(self) -> str:
        return self.graph.key

    def definition(self, arns: Mapping[str, str]) -> dict[str, Any]:
        """The state machine, given each entry's Lambda ARN."""
        return build_asl(self.graph, arns.__getitem__, arns[wds.CLEANUP_ENTRY], self.asl_options)


def plan_workflow(wds_path: str | Path, *, role_arn: str, params: Mapping[str, int] | None = None,
                  layers: Sequence[str] = (), memory_mb: int = 512, timeout_s: int = 300, runtime: str = "python3.12",
                  max_concurrency: int = 0, limits: wds.Limits | None = None) -> WorkflowPlan:
    path = Path(wds_path)
    graph = hdag.build(wds.load(path, params=params, limits=limits))
    app = graph.workflow.app
    entries: dict[str, str] = {}
    for f in graph.functions.values():
        entries.setdefault(f.template or f.name, f.handler)
    entries[wds.CLEANUP_ENTRY] = CLEANUP_HANDLER
    functions = []
    for entry, ref in entries.items():
        config: dict[str, Any] = {
            "Role": role_arn, "Handler": ref.replace(":", "."), "Runtime": runtime, "MemorySize": memory_mb,
            "Timeout": timeout_s, "Description": f"funcsion {graph.key} {entry}",
            "Environment": {"Variables": {"FUNCSION_WORKFLOW": graph.key}}}
        if layers:
            config["Layers"] = list(layers)
        functions.append(FunctionPlan(entry, lambda_name(app, entry), config))
    sm_name = re.sub(r"[^A-Za-z0-9_-]", "-", f"funcsion-{app}-{graph.workflow.workflow_id}")[:80]
    return WorkflowPlan(graph, functions, sm_name, build_task_zip(path.parent, entries.values()),
                        AslOptions(max_concurrency=max_concurrency))
