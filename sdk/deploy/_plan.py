"""What deploying a workflow to AWS makes, decided without touching AWS: one
Lambda per WDS entry plus the cleanup Lambda (names, handlers, settings), the
task zip, and the Step Functions definition once the Lambdas' ARNs are known.
``deploy_workflow`` (``aws.py``) carries a plan out through boto3;
``write_dry_run`` writes it to a directory instead (``funcsion deploy WDS
--target aws --dry-run --out DIR``): the ASL with the ARNs the functions will
have, both zips, and the function settings, for review or another tool.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hdag
import wds
from storage_functions.deploy import build_zip, code_sha256

from ._zip import TASK_LAYER_PACKAGES, build_task_zip
from .asl import AslOptions, build_asl, lambda_name

__all__ = ["FunctionPlan", "WorkflowPlan", "plan_workflow", "write_dry_run", "lambda_arn", "DRY_RUN_FILES",
           "CLEANUP_HANDLER"]

CLEANUP_HANDLER = "sdk._cleanup:handler"
#: What ``write_dry_run`` writes into its directory.
DRY_RUN_FILES = ("state_machine.asl.json", "functions.json", "task.zip", "storage.zip")
_ACCOUNT = re.compile(r"^arn:aws[a-zA-Z-]*:iam::(\d{12}):role/")


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
    return WorkflowPlan(graph, functions, sm_name, build_task_zip(path.parent),
                        AslOptions(max_concurrency=max_concurrency))


def lambda_arn(name: str, *, region: str, account: str) -> str:
    return f"arn:aws:lambda:{region}:{account}:function:{name}"


def write_dry_run(plan: WorkflowPlan, out_dir: str | Path, *, region: str) -> dict[str, Any]:
    """Write ``DRY_RUN_FILES`` into ``out_dir`` (made if missing); returns a summary. The ASL
    names each Lambda by the ARN it will have: the account comes from the role ARN, else
    ``<ACCOUNT_ID>`` stands for it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    m = _ACCOUNT.match(str(plan.functions[0].config.get("Role", "")))
    account = m.group(1) if m else "<ACCOUNT_ID>"
    arns = {f.entry: lambda_arn(f.name, region=region, account=account) for f in plan.functions}
    (out / "state_machine.asl.json").write_text(json.dumps(plan.definition(arns), indent=2) + "\n")
    (out / "task.zip").write_bytes(plan.zip)
    storage = build_zip()
    (out / "storage.zip").write_bytes(storage)
    doc = {
        "workflow": plan.workflow, "region": region, "state_machine_name": plan.state_machine_name,
        "task_zip": {"file": "task.zip", "bytes": len(plan.zip), "code_sha256": code_sha256(plan.zip),
                     "layer_packages": list(TASK_LAYER_PACKAGES)},
        "storage_zip": {"file": "storage.zip", "bytes": len(storage), "code_sha256": code_sha256(storage),
                        "note": "funcsion deploy storage makes these Lambdas (no layer needed)"},
        "functions": [{"entry": f.entry, "name": f.name, "arn": arns[f.entry], **f.config} for f in plan.functions],
        "execution": {"name": "<run id from sdk.Client(endpoints).start_run(...)>",
                      "input": {"funcsion": {"metadata": "<host:port>", "daemon": "<host:port>",
                                             "store_token": "run:<run id>:<HMAC>", "token": "<run token>",
                                             "cos_url": "s3://<bucket>/<prefix>"}}},
    }
    (out / "functions.json").write_text(json.dumps(doc, indent=2) + "\n")
    return {**doc, "out": str(out), "files": list(DRY_RUN_FILES)}
