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
