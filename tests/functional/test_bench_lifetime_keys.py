"""``funcsion bench lifetime --no-fragmentation --json``: the predictor comparison's keys,
with the input size the shipped generalisation runs recorded (the MLP takes it and the
run's width, the lookup is per stage and input size beside the per-stage one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lifetime_model import FEATURES
from lifetime_model._model_file import RUN_INPUTS, SIZE_INPUT


@pytest.mark.slow
def test_bench_lifetime_reports_every_predictor_seen_and_unseen_with_the_input_size(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.cli import main

    assert main(["bench", "lifetime", "--no-fragmentation", "--epochs", "20", "--examples", "wordcount",
                 "--state-dir", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    r = json.loads(out.strip().splitlines()[-1])
    for part in ("seen", "unseen"):
        for name in ("mlp", "lookup", "stage_lookup", "constant", "heuristic"):
            assert set(r[part][name]) >= {"mae_ms", "accuracy", "strict_accuracy"}, (part, name)
            assert r[part][name]["rows"] == r[part]["rows"] > 0
    g = r["generalisation"]
    assert g["mlp_inputs"] == [*FEATURES, *RUN_INPUTS]              # the shipped runs recorded their input size
    assert g["mlp_mae_below_lookup"] == round(1 - r["unseen"]["mlp"]["mae_ms"] / r["unseen"]["lookup"]["mae_ms"], 4)
    assert "the MLP takes" in out and SIZE_INPUT in out
