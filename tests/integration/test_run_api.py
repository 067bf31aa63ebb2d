"""``sdk.run`` and ``sdk.run_jobs``, the Python API for whole runs (issue 30, 4): the code path
of ``funcsion run``, a typed ``Report`` (status, outputs, ``get``, the raw dict), bad input
raised before any stack starts, and ``import sdk`` still light."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import sdk
from sdk._runs import JobsReport, Report, RunOptionError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WORDCOUNT = EXAMPLES / "wordcount" / "wordcount.wds.json"


def test_the_public_names_of_sdk() -> None:
    assert sorted(sdk.__all__) == sorted([
        "CODECS", "Client", "CodecError", "Config", "ConfigError", "Endpoints", "FatalTaskError", "FuncsionError",
        "MetadataError", "MissingOutputs", "NoRunContext", "ObjectExpired", "RunContext", "StoreFailure",
        "TaskError", "TaskFailed", "TaskSession", "UndeclaredOutput", "UndeclaredRead", "current", "get",
        "get_many", "inputs", "logger", "outputs", "put", "put_many", "task", "ValueStream",
        "JobsReport", "OutputNotKept", "Report", "RunFailed", "RunOptionError", "run", "run_jobs",
        "offload", "offload_get", "offload_cleanup", "offload_start", "offload_start_execution",
        "offload_execution_input", "offload_items", "MapItemsTooLarge", "ReferenceFreed", "ReferenceRefused"])
    for name in sdk.__all__:
        assert getattr(sdk, name) is not None


def test_import_sdk_stays_light() -> None:
    code = ("import sys, sdk; sdk.run; print(sorted(m for m in ('networkx', 'tqdm', 'hdag', 'metadata_server', "
            "'torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_bad_input_raises_before_any_stack_starts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with pytest.raises(sdk.FuncsionError, match="missing.wds.json"):
        sdk.run(tmp_path / "missing.wds.json", state_dir=str(state))
    with pytest.raises(RunOptionError, match="unknown run option 'kill_rat'; did you mean kill_rate"):
        sdk.run(WORDCOUNT, state_dir=str(state), kill_rat=0.1)
    with pytest.raises(sdk.FuncsionError, match="--crash mapper_99: workflow word-count/1 has no task"):
        sdk.run(WORDCOUNT, state_dir=str(state), crash=["mapper_99"])
    with pytest.raises(RunOptionError, match="crash names one workflow's tasks"):
        sdk.run_jobs([WORDCOUNT, WORDCOUNT], state_dir=str(state), crash=["mapper_00"])
    with pytest.raises(RunOptionError, match="give one size for every job or one per WDS file"):
        sdk.run_jobs([WORDCOUNT, WORDCOUNT], state_dir=str(state), admit_budget=1 << 30, job_peaks=[1, 2, 3])
    assert not state.exists()


def test_a_run_returns_its_report_and_reads_its_outputs(tmp_path: Path) -> None:
    state = tmp_path / "state"
    report = sdk.run(WORDCOUNT, params={"mappers": 2, "reducers": 2}, policy="funcstore", state_dir=str(state))
    assert isinstance(report, Report)
    assert report.status == "succeeded" and report.succeeded and report.error is None
    assert report.raise_for_status() is report
    assert set(report.outputs) == {"word_counts"}
    counts = report.get("word_counts")
    assert isinstance(counts, (dict, list)) and counts  # decoded with its writer's codec
    assert report.raw["stack"]["kind"] == "embedded" and report.raw["stack"]["state_dir"] == str(state.resolve())
    saved = json.loads(Path(str(report.saved_to)).read_text())
    assert saved == report.raw  # the same report `funcsion report` shows
    with pytest.raises(sdk.OutputNotKept, match="kept no output 'nope'; it kept: word_counts"):
        report.get("nope")

    jobs = sdk.run_jobs([WORDCOUNT, WORDCOUNT], state_dir=str(state), admit_budget=1 << 30, job_peaks=8 << 20)
    assert isinstance(jobs, JobsReport) and jobs.succeeded
    assert [j.status for j in jobs.jobs] == ["succeeded", "succeeded"]
    assert len({j.run_id for j in jobs.jobs}) == 2 and report.run_id not in {j.run_id for j in jobs.jobs}
    assert jobs.raw["admission"]["budget_bytes"] == 1 << 30
    assert jobs.jobs[0].get("word_counts")
