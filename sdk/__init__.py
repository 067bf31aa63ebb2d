"""What users import.

In a task::

    @sdk.task
    def handler(event, context):
        text = sdk.get("raw_text")
        sdk.put("counts_00", count(text))

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
from ._runs import JobsReport, OutputNotKept, Report, RunFailed, RunOptionError, run, run_jobs
from ._values import ValueStream
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
]
