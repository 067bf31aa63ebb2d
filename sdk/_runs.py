"""Whole runs from Python: ``sdk.run`` and ``sdk.run_jobs``, the code path of ``funcsion run``.

One workflow::

    report = sdk.run("wordcount.wds.json", inputs={"raw_text": "book.txt"}, params={"mappers": 4})
    if report.status == "succeeded":
        print(report.get("summary"))      # the output, decoded with its writer's codec
    report.raw                            # the report as `funcsion report RUN --json` shows it

Several workflows as concurrent jobs on one stack, each its own run::

    jobs = sdk.run_jobs(["a.wds.json", "b.wds.json"], admit_budget=64 << 20, job_peaks=[40 << 20, 30 << 20])
    [job.status for job in jobs.jobs]

Where a run goes: ``stack=`` (a ``stack.json`` or ``metadata=HOST:PORT,daemon=HOST:PORT``
with the tokens in FUNCSION_ADMIN_TOKEN and FUNCSION_STORE_TOKEN), else the stack ``funcsion
up`` keeps alive on the state directory, else an embedded stack started for the run (and
stopped after it). The report's ``stack`` says which it used. Options (keywords, see
``RunOptions``): ``state_dir``, ``stack``, ``crash_rate``, ``crash``, ``kill_rate``,
``kill_storage_rate``, ``restart_daemon_after_s``, ``seed``, ``progress``, ``max_concurrency``,
``capacity`` (bytes), ``latency_sensitive``; the rest of the configuration comes from
FUNCSION_* variables and ``funcsion.toml`` as for the CLI (``sdk.Config``).

Errors: bad input (the WDS, an input file, a parameter, an option) raises a ``FuncsionError``
naming what is wrong before any stack starts (``funcsion run`` exits 2 on it); a run that
could not start raises too (the state directory is another stack's, the stack cannot be
reached). Once a run started, every way it stops ends it and returns its ``Report``: a failed
or aborted run is a report with that status, not an exception (``Report.raise_for_status``
turns it into one). The report is also saved as ``<state_dir>/runs/<run_id>.json``.

Importing this module is light (``import sdk`` in a task Lambda): the runner (networkx,
tqdm, the servers) is imported inside ``run``. Not here: the report's text
(``sdk.cli._summary``) or signals (``funcsion run`` installs its own handlers around ``run``).
"""

from __future__ import annotations

import difflib
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from funcsion_errors import FuncsionError

if TYPE_CHECKING:
    from ._client import Endpoints
    from ._config import Config
    from .local._stack import Stack

__all__ = ["run", "run_jobs", "Report", "JobsReport", "RunOptions", "RunOptionError", "RunFailed",
           "OutputNotKept"]


class RunOptionError(FuncsionError, ValueError):
    """An option of ``sdk.run``/``sdk.run_jobs`` (or of ``funcsion run``) is wrong or unknown."""

    retryable = False


class RunFailed(FuncsionError):
    """``Report.raise_for_status``: the run did not succeed (the message says what stopped it)."""

    retryable = False


class OutputNotKept(FuncsionError):
    """``Report.get``: the run kept no such output, or its copy cannot be read or decoded."""

    retryable = False


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How to run (every field optional; ``None`` defers to the configuration)."""

    state_dir: str | None = None
    stack: str | Endpoints | None = None  # a stack.json, metadata=HOST:PORT,daemon=HOST:PORT, or Endpoints
    crash_rate: float | None = None
    crash: Sequence[str] = ()  # FUNCTION[:POINT]: crash that task's first attempt
    kill_rate: float | None = None
    kill_storage_rate: float | None = None
    restart_daemon_after_s: float | None = None
    seed: int | None = None
    progress: bool | None = False  # None: progress bars when stderr is a terminal
    max_concurrency: int = 0
    capacity: int = 0  # bytes the run may hold in memory (0: no reservation)
    latency_sensitive: bool = True

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> RunOptions:
        """The options from keywords; an unknown name raises ``RunOptionError`` naming close ones."""
        known = [f.name for f in fields(cls)]
        for name in options:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=2)
                hint = f"did you mean {' or '.join(close)}?" if close else f"known: {', '.join(known)}"
                raise RunOptionError(f"unknown run option {name!r}; {hint}")
        opts = cls(**options)
        if opts.max_concurrency < 0:
            raise RunOptionError(f"max_concurrency {opts.max_concurrency}: give a number of tasks >= 1")
        if opts.capacity < 0:
            raise RunOptionError(f"capacity {opts.capacity}: give a number of bytes >= 0")
        return opts


@dataclass(frozen=True)
class Report:
    """A finished run: ``raw`` is the report as saved (``funcsion report RUN --json``)."""

    raw: dict[str, Any]
    saved_to: str | None = None
    config: Config | None = field(default=None, repr=False, compare=False)

    @property
    def status(self) -> str:
        """``succeeded``, ``failed`` or ``aborted``."""
        return str(self.raw["status"])

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    @property
    def run_id(self) -> str:
        return str(self.raw["run_id"])

    @property
    def outputs(self) -> dict[str, str]:
        """Each workflow output's name and where its copy is (a file, or ``s3://...``)."""
        return dict(self.raw.get("outputs") or {})

    @property
    def error(self) -> str | None:
        return self.raw.get("error")

    @property
    def failed_task(self) -> str | None:
        return self.raw.get("failed_task")

    @property
    def wall_s(self) -> float:
        return float(self.raw.get("wall_s") or 0.0)

    def raise_for_status(self) -> Report:
        """This report when the run succeeded, else ``RunFailed`` with what stopped it."""
        if not self.succeeded:
            from .cli._summary import failure_line

            raise RunFailed(failure_line(self.raw) or f"run {self.run_id} {self.status}")
        return self

    def get(self, name: str, *, unpickle: bool = False) -> Any:
        """Output (or ``persist=True`` copy) ``name`` of the run, decoded with its writer's codec
        (``str`` and ``bytes`` as they were put, JSON and msgpack values as Python values; a
        ``pickle`` value only with ``unpickle=True``: unpickling runs code)."""
        from ._codecs import decode

        doc = self.raw
        kept = {**(doc.get("persisted") or {}), **(doc.get("outputs") or {})}
        if name not in kept:
            names = ", ".join(kept) or "none (a run keeps its outputs only when it succeeds)"
            raise OutputNotKept(f"run {self.run_id} kept no output {name!r}; it kept: {names}")
        data = _read_location(kept[name], self.config)
        if name in (doc.get("outputs") or {}):  # a saved output holds the payload only
            codec, payload = (doc.get("output_codecs") or {}).get(name, "bytes"), data
        else:  # a persist=True copy starts with its codec byte
            from ._client import _CODEC_NAMES

            codec, payload = (_CODEC_NAMES.get(data[0], "bytes"), data[1:]) if data else ("bytes", data)
        if codec == "pickle" and not unpickle:
            raise OutputNotKept(f"output {name!r} of run {self.run_id} was written with codec 'pickle': "
                                "unpickling runs code, so pass unpickle=True if you trust the run's handlers")
        try:
            return decode(payload, codec)
        except FuncsionError as exc:
            raise OutputNotKept(f"output {name!r} of run {self.run_id}: {exc}") from None


@dataclass(frozen=True)
class JobsReport:
    """Concurrent jobs: every job's ``Report`` in the given order and ``raw``, the summary
    ``funcsion run A B --json`` prints (``status``: succeeded only if every job did)."""

    raw: dict[str, Any]
    jobs: list[Report]

    @property
    def status(self) -> str:
        return str(self.raw["status"])

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


def _read_location(location: str, cfg: Config | None) -> bytes:
    if location.startswith("s3://"):
        from urllib.parse import urlsplit

        from storage_functions.cos import S3COS
        from storage_functions.exceptions import StorageError

        parts = urlsplit(location)
        try:
            return S3COS(parts.netloc, endpoint_url=(cfg.s3_endpoint_url if cfg else "") or None,
                         region_name=cfg.region if cfg else None).get(parts.path.lstrip("/"))
        except StorageError as exc:
            raise OutputNotKept(f"cannot read {location}: {exc}") from None
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise OutputNotKept(f"cannot read {location}: {exc.strerror or exc} (the run's COS copy is gone)") from None


# -- running ------------------------------------------------------------------------------
def _config(opts: RunOptions, policy: str | None) -> Config:
    from ._config import Config

    cfg = Config.load(state_dir=opts.state_dir, policy=policy, crash_rate=opts.crash_rate, kill_rate=opts.kill_rate,
                      kill_storage_rate=opts.kill_storage_rate, restart_daemon_after_s=opts.restart_daemon_after_s)
    if cfg.restart_daemon_after_s and cfg.kill_storage_rate:
        raise RunOptionError("--restart-daemon-after (restart_daemon_after_s) and --kill-storage-rate cannot be combined "
                             "yet: run them one at a time (the storage chaos drives an in-process daemon)")
    return cfg


def _executor_options(cfg: Config, opts: RunOptions, crash: Mapping[str, str]) -> Any:
    from .local._executor import ExecutorOptions

    return ExecutorOptions(max_attempts=cfg.max_attempts, task_memory_mb=cfg.task_memory_mb,
                           task_timeout_s=cfg.task_timeout_s, concurrency=cfg.task_concurrency,
                           crash_rate=cfg.crash_rate, crash=dict(crash), kill_rate=cfg.kill_rate, seed=opts.seed,
                           progress=opts.progress)


def _given_stack(opts: RunOptions) -> Endpoints | None:
    import os

    from ._client import Endpoints

    if opts.stack is None or isinstance(opts.stack, Endpoints):
        return opts.stack
    from .cli._common import stack_option

    try:
        return stack_option(str(opts.stack), os.environ)
    except ValueError as exc:
        raise RunOptionError(str(exc)) from None


class _Target:
    """Where runs go: ``endpoints`` of a running stack (given, or ``funcsion up``'s), else an
    embedded ``Stack`` started on ``enter`` and stopped on ``exit``; ``info`` is the report's
    ``stack``."""

    def __init__(self, cfg: Config, given: Endpoints | None, *, needs_embedded: str | None = None) -> None:
        from .local._stack import STACK_FILE, read_stack_file

        self.cfg, self.endpoints = cfg, given
        self.stack: Stack | None = None
        state = str(Path(cfg.state_dir).resolve())
        running = read_stack_file(cfg.state_dir) if given is None else None
        if given is not None:
            self.info: dict[str, Any] = {"kind": "given", "state_dir": state, "metadata": given.metadata,
                                         "daemon": given.daemon}
        elif running is not None:
            from .cli._common import stack_endpoints

            self.endpoints = stack_endpoints(running)
            self.info = {"kind": "up", "state_dir": state, "stack_file": str(Path(state) / STACK_FILE),
                         "pid": running.get("pid"), "metadata": running["metadata"], "daemon": running["daemon"]}
        else:
            self.info = {"kind": "embedded", "state_dir": state}
        if needs_embedded and self.endpoints is not None:
            raise RunOptionError(f"{needs_embedded} needs an embedded stack; this run would use "
                                 f"{'--stack' if given is not None else 'the stack `funcsion up` started'} (stop "
                                 "it, or drop the option)")

    def __enter__(self) -> _Target:
        if self.info["kind"] == "up":  # a driver killed while this stack lived left its run running
            from ._client import Client
            from .local._drivers import end_orphaned_runs

            assert self.endpoints is not None
            with Client(self.endpoints) as admin:
                for shard in admin.shard_clients:    # each metadata shard's running runs
                    end_orphaned_runs(self.cfg.state_dir, shard)
        if self.endpoints is None:
            from .local._stack import Stack

            self.stack = Stack(self.cfg, metadata_port=0, daemon_port=0).start()
            ep = self.stack.endpoints
            self.info.update(metadata=ep.metadata, daemon=ep.daemon)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.stack is not None:
            self.stack.stop()


def _say_starting(cfg: Config, progress: bool | None) -> None:
    """A line while the embedded stack starts (a second or two), where progress bars are shown."""
    from .local._progress import starting_stack_line

    if sys.stderr.isatty() if progress is None else progress:
        print(starting_stack_line(str(cfg.state_dir), cfg.storage_functions), file=sys.stderr, flush=True)


def run(wds: str | Path, *, inputs: Mapping[str, str | Path] | None = None, params: Mapping[str, int] | None = None,
        policy: str | None = None, **options: Any) -> Report:
    """Run the workflow ``wds`` (a WDS file; its handlers live beside it) once and return its report.

    ``inputs``: workflow input name -> file (default: ``inputs.py`` beside the WDS); ``params``:
    the WDS template parameters; ``policy``: ``funcstore`` (default), ``pocket``, ``oracle``,
    ``jiffy:<lease_ms>``; ``options``: see ``RunOptions`` and the module docstring. Raises a
    ``FuncsionError`` on bad input and when the run cannot start; returns a report however the
    run ended."""
    from .local._executor import parse_crash_specs
    from .local._run import RunHints, prepare_run, run_workflow

    opts = RunOptions.of(options)
    try:
        crash = parse_crash_specs(list(opts.crash))
    except ValueError as exc:
        raise RunOptionError(str(exc)) from None
    given = _given_stack(opts)
    cfg = _config(opts, policy)
    exec_opts = _executor_options(cfg, opts, crash)
    hints = RunHints(opts.max_concurrency, opts.capacity, opts.latency_sensitive)
    prep = prepare_run(wds, inputs={k: str(v) for k, v in (inputs or {}).items()}, params=params,
                       options=exec_opts, limits=cfg.wds_limits())  # bad input: raised before any stack starts
    target = _Target(cfg, given, needs_embedded="--restart-daemon-after" if cfg.restart_daemon_after_s else None)
    if target.endpoints is None:
        _say_starting(cfg, opts.progress)
    with target:
        if target.stack is not None:
            rep = run_workflow(prep, config=cfg, stack=target.stack, options=exec_opts, hints=hints,
                               where=target.info)
        else:
            from ._client import Client

            assert target.endpoints is not None
            with Client(target.endpoints) as client:
                rep = run_workflow(prep, config=cfg, client=client, options=exec_opts, hints=hints,
                                   where=target.info)
    return Report(rep.to_dict(), rep.saved_to, cfg)


def run_jobs(wds: Sequence[str | Path], *, policy: str | None = None, admit_budget: int = 0,
             job_peaks: int | Sequence[int] | None = None, **options: Any) -> JobsReport:
    """Run several workflows as concurrent jobs on one stack, each its own run with its default
    inputs (``inputs.py`` beside each WDS), and return every job's report.

    ``admit_budget`` (bytes) with ``job_peaks`` (one expected peak for every job, or one per
    job) admits jobs first come, first served while their peaks fit the budget (FuncStore
    Fig. 11b); a job larger than the budget is refused before any starts. ``options``: those of
    ``run`` but ``crash`` (it names one workflow's tasks) and ``restart_daemon_after_s``."""
    from .local._jobs import jobs_summary
    from .local._jobs import run_jobs as run_many
    from .local._run import RunHints, prepare_run

    opts = RunOptions.of(options)
    if opts.crash:
        raise RunOptionError("crash names one workflow's tasks: run the WDS files one at a time to use it")
    if opts.restart_daemon_after_s:
        raise RunOptionError("restart_daemon_after_s restarts one run's daemon: run the WDS files one at a time "
                             "to use it")
    if not wds:
        raise RunOptionError("run_jobs needs at least one WDS file")
    admission, peaks = _admission(admit_budget, job_peaks, len(wds))
    given = _given_stack(opts)
    cfg = _config(replace(opts, restart_daemon_after_s=0.0), policy)
    exec_opts = _executor_options(cfg, opts, {})
    hints = RunHints(opts.max_concurrency, opts.capacity, opts.latency_sensitive)
    preps = [prepare_run(w, options=exec_opts, limits=cfg.wds_limits()) for w in wds]  # bad input: raised here
    start = time.monotonic()
    with _Target(cfg, given) as t:
        reports = run_many(preps, config=cfg, stack=t.stack, endpoints=t.endpoints, options=exec_opts, hints=hints,
                           admission=admission, peaks=peaks, where=t.info)
    doc = jobs_summary(reports, time.monotonic() - start)
    if admission is not None:
        doc["admission"] = {"budget_bytes": admission.budget_bytes, "max_running": admission.max_running,
                            "peak_held_bytes": admission.peak_held_bytes,
                            "log": [[what, str(wds[int(str(job))]), held] for what, job, held in admission.log]}
    return JobsReport(doc, [Report(r.to_dict(), r.saved_to, cfg) for r in reports])


def _admission(budget: int, peaks: int | Sequence[int] | None, jobs: int) -> tuple[Any, list[int] | None]:
    """The admission controller and every job's expected peak (None, None without a budget)."""
    from .local._admission import Admission

    if not budget:
        if peaks:
            raise RunOptionError("--job-peak is the expected peak for --admit-budget (in Python: job_peaks and "
                                 "admit_budget): give the budget too")
        return None, None
    if budget < 0:
        raise RunOptionError(f"--admit-budget {budget}: give a number of bytes > 0")
    sizes = [peaks] if isinstance(peaks, int) else list(peaks or [])
    if len(sizes) not in (1, jobs):
        raise RunOptionError(f"--job-peak (job_peaks): give one size for every job or one per WDS file ({jobs}), "
                             f"got {len(sizes)}")
    return Admission(budget), (sizes * jobs if len(sizes) == 1 else sizes)
