"""What users import.

In a task::

    @sdk.task
    def handler(event, context):
        text = sdk.get("raw_text")
        sdk.put("counts_00", count(text))

A plain Lambda handler under any Step Functions state machine: ``@sdk.offload`` (large
results become references freed after their last reader; see ``sdk._offload``), with
``sdk.offload_start`` / ``sdk.offload_start_execution`` on the driver side and
``sdk.offload_cleanup`` for the execution's status-change event; ``sdk.offload_items(items)``
hands a Map state a list too large for the state, as chunk references.

In a script or driver: ``sdk.Client(endpoints)``, ``client.start_run(key)``,
then ``put``/``get``/``list``/``delete`` on the run. A whole run, as ``funcsion run``
does it: ``report = sdk.run("wf.wds.json", inputs=..., params=..., policy=...)``
(``sdk.run_jobs([...])`` for concurrent jobs; see ``sdk._runs``), imported lazily. The ``funcsion`` CLI lives
in ``sdk.cli`` and the embedded stack in ``sdk.local``; neither is imported
here, so a Lambda deployment never loads networkx or server code.
"""

from __future__ import annotations

from funcsion_errors import FuncsionError

from ._client import Client, Endpoints
from ._codecs import CODECS
from ._config import Config
from ._task import (
    RunContext,
    TaskFailed,
    TaskSession,
    current,
    get,
    get_many,
    inputs,
    logger,
    outputs,
    put,
    put_many,
    task,
)
from ._offload import offload as offload
from ._offload import offload_get as offload_get
from ._offload_items import offload_items as offload_items
from ._offload_cleanup import handler as _offload_cleanup
from ._offload_plan import execution_input as _offload_execution_input
from ._offload_plan import start_execution as _offload_start_execution
from ._offload_plan import start_run as _offload_start
from ._runs import JobsReport, OutputNotKept, Report, RunFailed, RunOptionError, run, run_jobs
from ._values import ValueStream
from .exceptions import MapItemsTooLarge as MapItemsTooLarge
from .exceptions import ReferenceFreed as ReferenceFreed
from .exceptions import ReferenceRefused as ReferenceRefused
from .exceptions import (
    CodecError,
    ConfigError,
    FatalTaskError,
    MetadataError,
    MissingOutputs,
    NoRunContext,
    ObjectExpired,
    StoreFailure,
    TaskError,
    UndeclaredOutput,
    UndeclaredRead,
)

__all__ = [
    "CODECS", "Client", "CodecError", "Config", "ConfigError", "Endpoints", "FatalTaskError", "FuncsionError",
    "MetadataError", "MissingOutputs", "NoRunContext", "ObjectExpired", "RunContext", "StoreFailure", "TaskError", "TaskFailed",
    "TaskSession", "UndeclaredOutput", "UndeclaredRead", "current", "get", "get_many", "inputs", "logger",
    "outputs", "put", "put_many", "task", "ValueStream",
    "JobsReport", "OutputNotKept", "Report", "RunFailed", "RunOptionError", "run", "run_jobs",
    "offload", "offload_get", "offload_cleanup", "offload_start", "offload_start_execution",
    "offload_execution_input", "offload_items", "MapItemsTooLarge", "ReferenceFreed", "ReferenceRefused",
]
offload_cleanup = _offload_cleanup
offload_execution_input = _offload_execution_input
offload_start = _offload_start
offload_start_execution = _offload_start_execution
