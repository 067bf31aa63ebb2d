"""Deploy a user's state machine whose handlers use ``@sdk.offload`` to AWS as ONE
CloudFormation stack (``funcsion offload deploy ASL.json --target aws``).

``offload_bundle(asl, handlers)`` builds what the WDS path's ``bundle`` builds, from a
state machine definition and a handlers module instead of a WDS:

- the template (``_template``'s pieces: network, secrets, the server host, the storage
  Lambdas, the roles, the ``OUTPUTS`` contract) with one task Lambda per Lambda the
  definition invokes (``lambda:invoke``'s ``FunctionName``, or a Lambda ARN as
  ``Resource``), named as the definition names it, running ``<module>.<function>`` of the
  handlers module (``-`` read as ``_``: first the whole name, then the part after the first
  ``-``, as ``funcsion offload run`` maps them); the user's definition as the state
  machine, each of those references made the deployed Lambda's ARN (a qualifier such as
  ``:$LATEST`` or an alias is dropped); the EventBridge rule on the execution status changes
  and the status-cleanup Lambda (``sdk._offload_cleanup``) that ends the run of an execution
  however it ends;
- the task zip (the handlers module, the modules beside it that it imports, and the SDK's
  task files, ``_zip``) and the storage zip.

The bundle is a ``_stack.StackBundle`` (its ``graph`` the HDAG of the run's workflow,
``sdk._offload_plan.workflow_doc``), so ``write_dry_run`` and ``deploy_stack`` take it as
they are. An execution is started by a driver holding the stack's tokens:
``sdk.offload_start`` and ``sdk._offload_plan.start_execution`` with the stack's
``StateMachineArn`` (the execution's input carries the run).

Not here: the plan (``sdk.asl_plan``), the local runner (``offload_local``), the roles'
policies (``_iam``). The state machine role may invoke the task Lambdas only: a definition
that calls other services (an ``ItemReader`` from S3, SNS) needs a role of its own.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hdag
import wds
from storage_functions.deploy import build_zip

from .. import asl_plan
from .._offload_plan import workflow_doc
from ._stack import StackBundle, StackDeployError, _key
from ._template import (STATUS_CLEANUP_ENTRY, STATUS_CLEANUP_HANDLER, Artifacts, TemplateSettings, _function, _layers,
                        arn_mark, base_resources, stack_name, state_machine_resources, storage_prefix, whole_template)
from ._zip import build_task_zip

__all__ = ["offload_bundle", "offload_handlers", "rewrite_definition"]

_LAMBDA_ARN = re.compile(r"^arn:[^:]+:lambda:[^:]*:[^:]*:function:([^:]+)(?::.*)?$")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _lambda_of(ref: str) -> str:
    m = _LAMBDA_ARN.match(ref)
    return m.group(1) if m else ref.split(":", 1)[0]


def _camel(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", text) if part)


def offload_handlers(definition: asl_plan.Definition, handlers: str | Path) -> dict[str, str]:
    """Lambda name -> ``module.function`` of the handlers module ``handlers`` (a ``.py`` file),
    for every Lambda the definition's Task states invoke; a ``StackDeployError`` naming the
    Lambda, the state and the fix when one has no handler."""
    path = Path(handlers)
    if not path.is_file():
        raise StackDeployError(f"--handlers {path}: no such file; give the module defining one function per Lambda")
    spec = importlib.util.spec_from_file_location(f"_offload_deploy_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise StackDeployError(f"--handlers {path}: not a Python module")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out: dict[str, str] = {}
    for st in definition.states():
        if st.type != "Task":
            continue
        ref = _task_ref(st.raw)
        if ref is None:
            continue
        lam = _lambda_of(ref)
        if not _NAME.match(lam):
            raise StackDeployError(f"state {st.name!r} invokes {ref!r}: not a Lambda function name or ARN funcsion "
                                   "can deploy (1-64 letters, digits, '-', '_'); name the function in FunctionName")
        names = [lam.replace("-", "_")] + ([lam.split("-", 1)[1].replace("-", "_")] if "-" in lam else [])
        found = next((n for n in names if callable(getattr(mod, n, None))), None)
        if found is None:
            raise StackDeployError(f"state {st.name!r} invokes Lambda {lam!r}, but {path} defines no "
                                   f"{' or '.join(names)}: add the handler (decorated with @sdk.offload)")
        out[lam] = f"{path.stem}.{found}"
    if not out:
        raise StackDeployError("the state machine invokes no Lambda (no Task with lambda:invoke's FunctionName or a "
                               "Lambda ARN as Resource): nothing to deploy")
    return out


def _task_ref(raw: Mapping[str, Any]) -> str | None:
    """The Lambda a Task state invokes, as the definition writes it (None: another service)."""
    params = raw.get("Parameters") or raw.get("Arguments") or {}
    resource = str(raw.get("Resource", ""))
    if resource.startswith("arn:aws:states:::lambda:invoke") and isinstance(params, Mapping):
        fn = params.get("FunctionName")
        return fn if isinstance(fn, str) else None
    return resource if _LAMBDA_ARN.match(resource) else None


def rewrite_definition(doc: Mapping[str, Any], logical: Mapping[str, str]) -> dict[str, Any]:
    """``doc`` with every Task's Lambda reference made ``arn_mark`` of its Lambda's logical id
    (``logical``: Lambda name -> logical id), inside Parallel branches and Map iterations too."""
    out = copy.deepcopy(dict(doc))

    def walk(states: Any) -> None:
        if not isinstance(states, dict):
            return
        for st in states.values():
            if not isinstance(st, dict):
                continue
            if st.get("Type") == "Task" and (ref := _task_ref(st)) is not None:
                mark = arn_mark(logical[_lambda_of(ref)])
                params = st.get("Parameters") if "Parameters" in st else st.get("Arguments")
                if isinstance(params, dict) and params.get("FunctionName") == ref:
                    params["FunctionName"] = mark
                else:
                    st["Resource"] = mark
            for branch in st.get("Branches") or []:
                walk(branch.get("States"))
            for key in ("Iterator", "ItemProcessor"):
                if isinstance(st.get(key), dict):
                    walk(st[key].get("States"))

    walk(out.get("States"))
    return out


def offload_bundle(asl: str | Path, handlers: str | Path, *, app: str | None = None,
                   settings: TemplateSettings | None = None, threshold_bytes: int | None = None) -> StackBundle:
    """Plan the definition in file ``asl``, build both zips and render the template (see the
    module docstring); ``app`` (default: the file's name before its first ``.``) names the
    stack ``funcsion-<app>``; ``threshold_bytes``: the task Lambdas' ``offload_threshold_bytes``
    (their ``FUNCSION_OFFLOAD_THRESHOLD_BYTES``; default: the decorator's own default)."""
    settings = settings or TemplateSettings()
    env: dict[str, str] | None = None
    if threshold_bytes is not None:
        from .._config import Config

        Config.load(env={}, offload_threshold_bytes=threshold_bytes)  # a bad value fails here, naming the field
        env = {"FUNCSION_OFFLOAD_THRESHOLD_BYTES": str(threshold_bytes)}
    path = Path(asl)
    plan = asl_plan.load(path)
    app = app or path.name.split(".")[0].replace("_", "-")
    lambdas = offload_handlers(plan.definition, handlers)
    graph = hdag.build(wds.loads(json.dumps(workflow_doc(plan, app)), source=str(path)))
    name = stack_name(app)
    hpath = Path(handlers)
    task_zip = build_task_zip(hpath.parent, sorted(set(lambdas.values()) | {STATUS_CLEANUP_HANDLER}))
    storage_zip = build_zip()
    artifacts = Artifacts(_key(name, "task", task_zip), _key(name, "storage", storage_zip))
    prefix = storage_prefix(app)
    res, storage_ids = base_resources(settings, artifacts, prefix)
    logical: dict[str, str] = {}
    for lam, handler in sorted(lambdas.items()):
        base = "Task" + (_camel(lam) or "Fn")
        lid, k = base[:200], 2
        while lid in logical.values():
            lid, k = f"{base[:200]}{k}", k + 1
        logical[lam] = lid
        res.update(_function(lid, lam, handler=handler, role="TaskRole", code_key=artifacts.task_key,
                             memory=settings.task_memory_mb, timeout=settings.task_timeout_s, runtime=settings.runtime,
                             description=f"funcsion offload {app}: {handler}"[:256], env=env, layers=_layers(())))
    res.update(_function("StatusCleanup", f"{name[:40]}-status-cleanup"[:64], handler=STATUS_CLEANUP_HANDLER,
                         role="TaskRole", code_key=artifacts.task_key, memory=settings.task_memory_mb,
                         timeout=settings.task_timeout_s, runtime=settings.runtime,
                         description=f"funcsion offload {app}: end runs of ended executions ({STATUS_CLEANUP_ENTRY})",
                         layers=_layers(())))
    definition = rewrite_definition(json.loads(path.read_text(encoding="utf-8")), logical)
    res.update(state_machine_resources(re.sub(r"[^A-Za-z0-9_-]", "-", name)[:80], definition,
                                       list(logical.values()), storage_ids))
    template = whole_template(f"funcsion offload deployment of state machine {app}: its task Lambdas, the "
                              "status rule and cleanup Lambda, storage Lambdas in a VPC, the server host", settings,
                              res, prefix)
    return StackBundle(graph, name, template, task_zip, storage_zip, artifacts)
