"""The admission controller of concurrent jobs under a memory budget: first come, first
served while the admitted jobs' expected peaks fit, no overtaking, a job larger than the
budget refused with a clear error before anything runs."""

from __future__ import annotations

import pytest

from sdk.local._admission import Admission, AdmissionError


def test_jobs_are_admitted_in_order_while_their_peaks_fit() -> None:
    a = Admission(100)
    assert a.submit("a", 60) == ["a"]
    assert a.submit("b", 50) == []            # 60 + 50 > 100: waits
    assert a.submit("c", 30) == []            # would fit (90) but does not overtake b
    assert a.held_bytes == 60 and list(a.running) == ["a"]
    assert a.finish("a") == ["b", "c"]         # 50 + 30 fit together once a is done
    assert a.max_running == 2 and a.peak_held_bytes == 80
    assert a.finish("c") == [] and a.finish("b") == []
    assert a.held_bytes == 0
    assert [(what, job) for what, job, _ in a.log] == [("admit", "a"), ("finish", "a"), ("admit", "b"),
                                                       ("admit", "c"), ("finish", "c"), ("finish", "b")]


def test_a_job_that_exactly_fills_the_budget_runs_alone() -> None:
    a = Admission(100)
    assert a.submit(0, 100) == [0] and a.submit(1, 1) == []
    assert a.finish(0) == [1] and a.max_running == 1


def test_a_job_larger_than_the_budget_is_refused_clearly() -> None:
    a = Admission(200 << 20)
    with pytest.raises(AdmissionError, match=r"job video expects a peak of 300.0 MiB .* budget of 200.0 MiB"):
        a.submit("video", 300 << 20)
    assert not a.waiting and not a.running
    with pytest.raises(AdmissionError, match=">= 0"):
        a.check("x", -1)
    with pytest.raises(ValueError, match="positive"):
        Admission(0)


def test_finishing_an_unknown_job_or_submitting_twice_is_a_bug() -> None:
    a = Admission(10)
    a.submit("a", 5)
    with pytest.raises(ValueError, match="already submitted"):
        a.submit("a", 5)
    with pytest.raises(ValueError, match="not running"):
        a.finish("b")
