"""Concurrent jobs on one stack (FuncStore Sec. V-C): several workflows at once, each its own
run, each with the right output and nothing leaked; ``funcsion run A.wds B.wds`` reports
every job, and refuses the options that name one workflow's data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.local._executor import ExecutorOptions
from sdk.local._inputs import prepare_run
from sdk.local._jobs import jobs_summary, run_jobs
from sdk.local._stack import Stack

from .test_wordcount_e2e import WC, expected_counts, output

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two word counts cold-start their workers: ~8 s on 2 cores
def test_two_word_counts_at_once_are_each_right_and_leak_nothing(stack: Stack, tmp_path: Path) -> None:
    opts = ExecutorOptions(progress=False)
    texts = {"a": "the cat sat on the mat\n" * 3000, "b": "a dog and a dog's bone\n" * 2000}
    preps = []
    for name, text in texts.items():
        (tmp_path / f"{name}.txt").write_text(text)
        preps.append(prepare_run(WC, inputs={"raw_text": str(tmp_path / f"{name}.txt")}, options=opts,
                                 limits=stack.config.wds_limits()))
    reports = run_jobs(preps, config=stack.config, stack=stack, options=opts)
    assert len({r.run_id for r in reports}) == 2
    for r, text in zip(reports, texts.values()):
        assert r.status == "succeeded", r.error
        assert output(stack, r, "word_counts") == expected_counts(text)
        assert r.memory["leaked_bytes"] == 0 and r.memory["mb_s"] > 0
    doc = jobs_summary(reports, 1.0)
    assert doc["status"] == "succeeded" and doc["leaked_bytes"] == 0 and len(doc["jobs"]) == 2
    assert doc["mb_s"] == round(sum(r.memory["mb_s"] for r in reports), 6)


def test_several_wds_files_refuse_an_input_naming_one_workflows_data(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "sdk.cli", "run", str(WC), str(WC), "--input", "raw_text=x.txt",
                        "--state-dir", str(tmp_path)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60, check=False)
    assert p.returncode == 2
    assert "--input names one workflow's tasks or data: run the WDS files one at a time" in p.stderr
    assert "Traceback" not in p.stderr
    assert "run r-" not in p.stdout  # no run started


@pytest.mark.slow  # three word counts, two at a time
def test_jobs_wait_for_the_budget_and_each_leaks_nothing(stack: Stack) -> None:
    from sdk.local._admission import Admission

    opts = ExecutorOptions(progress=False)
    prep = prepare_run(WC, options=opts, limits=stack.config.wds_limits())
    adm = Admission(5 << 20)
    reports = run_jobs([prep, prep, prep], config=stack.config, stack=stack, options=opts, admission=adm,
                       peaks=[2 << 20, 2 << 20, 2 << 20])
    assert [r.status for r in reports] == ["succeeded"] * 3
    assert [r.memory["leaked_bytes"] for r in reports] == [0, 0, 0]
    assert adm.max_running == 2 and adm.peak_held_bytes == 4 << 20 and not adm.running
    admits = [job for what, job, _ in adm.log if what == "admit"]
    assert admits == [0, 1, 2]
    first_done = next(i for i, (what, _, _) in enumerate(adm.log) if what == "finish")
    assert [what for what, _, _ in adm.log].index("admit", first_done) > first_done   # job 2 waited for one


def test_a_job_larger_than_the_budget_is_refused_before_any_starts(stack: Stack) -> None:
    from sdk.local._admission import Admission, AdmissionError

    opts = ExecutorOptions(progress=False)
    prep = prepare_run(WC, options=opts, limits=stack.config.wds_limits())
    runs_before = len(stack.handler.state.runs)
    with pytest.raises(AdmissionError, match=r"job 1 expects a peak of 300.0 MiB.*budget of 200.0 MiB"):
        run_jobs([prep, prep], config=stack.config, stack=stack, options=opts, admission=Admission(200 << 20),
                 peaks=[1 << 20, 300 << 20])
    assert len(stack.handler.state.runs) == runs_before


@pytest.mark.slow  # three word counts through the CLI, two at a time
def test_funcsion_run_admits_jobs_within_a_budget(tmp_path: Path) -> None:
    import json

    p = subprocess.run([sys.executable, "-m", "sdk.cli", "run", str(WC), str(WC), str(WC), "--admit-budget", "5MiB",
                        "--job-peak", "2MiB", "--json", "--no-progress", "--state-dir", str(tmp_path)],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=180,
                       check=False)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    assert doc["status"] == "succeeded" and doc["leaked_bytes"] == 0
    assert [j["memory"]["leaked_bytes"] for j in doc["jobs"]] == [0, 0, 0]
    adm = doc["admission"]
    assert adm["max_running"] == 2 and adm["budget_bytes"] == 5 << 20
    assert [e[0] for e in adm["log"]][:3] == ["admit", "admit", "finish"]     # the third waited
    assert "at most 2 jobs at once" in p.stdout


@pytest.mark.parametrize(("args", "why"), [
    (["--admit-budget", "200MiB", "--job-peak", "1MiB,300MiB"], "job 1 expects a peak of 300.0 MiB"),
    (["--admit-budget", "200MiB", "--job-peak", "1MiB,2MiB,3MiB"], "one size for every job or one per WDS file (2)"),
    (["--job-peak", "1MiB"], "--job-peak is the expected peak for --admit-budget"),
])
def test_bad_admission_options_are_one_line(tmp_path: Path, args: list[str], why: str) -> None:
    p = subprocess.run([sys.executable, "-m", "sdk.cli", "run", str(WC), str(WC), *args, "--state-dir", str(tmp_path)],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120,
                       check=False)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert why in p.stderr and "Traceback" not in p.stderr
    assert "run r-" not in p.stdout


def test_a_budget_needs_several_jobs(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "sdk.cli", "run", str(WC), "--admit-budget", "1MiB",
                        "--state-dir", str(tmp_path)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60, check=False)
    assert p.returncode == 2 and "give several WDS files" in p.stderr and "Traceback" not in p.stderr
