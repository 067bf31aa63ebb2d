"""Lifetime prediction on the embedded stack: a run records its objects' lifetimes in
the category's dataset, the metadata server predicts with a model dropped into its model
directory while it runs (no restart) and with the heuristic otherwise, and the CLI
trains, refuses bad input in one line, and benchmarks."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import hdag
import wds
from lifetime_model import Mlp, load_rows, save_model
from metadata_server import HeuristicPredictor, predict_lifetimes
from sdk._config import Config
from sdk.local._run import run_workflow
from sdk.local._stack import Stack

WORDCOUNT = Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "wordcount.wds.json"


def _constant_model(ms: float, version: int) -> Mlp:
    import numpy as np

    n = len(hdag.NAMES)
    zeros = tuple(np.zeros((a, b)) for a, b in ((n, 64), (64, 64), (64, 64), (64, 1)))
    return Mlp(zeros, tuple(np.zeros(w.shape[1]) for w in zeros), np.zeros(n), np.ones(n), ms, 1.0,
               {"model_version": version})


def test_runs_feed_the_dataset_and_a_new_model_serves_without_restart(tmp_path: Path) -> None:
    cfg = Config.load(state_dir=str(tmp_path / "state"), env={})
    graph = hdag.build(wds.load(WORDCOUNT))
    with Stack(cfg, metadata_port=0, daemon_port=0) as stack:
        state = stack.handler.state
        state.predictor.store.directories = [cfg.resolved_lifetime_models]   # not the shipped models
        report = run_workflow(WORDCOUNT, config=cfg, stack=stack)
        assert report.status == "succeeded"
        run = state.runs[report.run_id]
        assert run.predicted == predict_lifetimes(HeuristicPredictor(), graph)   # no model: the heuristic
        rows = load_rows(cfg.resolved_lifetime_data, "analytics")
        assert {r.object for r in rows} == {n for n, o in graph.objects.items() if o.features is not None}
        assert all(r.lifetime_ms >= 0 and r.run.endswith("/" + report.run_id) for r in rows)
        # the run's concurrency (its tasks at once: the widest stage or the executor's workers,
        # whichever is fewer) places writers and readers in waves
        assert 2 <= run.concurrency <= 4 and run.concurrency == min(4, max(2, os.cpu_count() or 2))
        waves = graph.features_at(run.concurrency)
        assert all(r.features == waves[r.object].vector() for r in rows)
        assert {r.features[5] for r in rows if r.object.startswith("counts_")} == \
               {round(k / run.concurrency, 3) for k in range(4)}                # mappers 0..3
        assert (cfg.resolved_lifetime_data / "analytics.csv").read_text().startswith("# funcsion lifetime dataset")

        save_model(cfg.resolved_lifetime_models, "analytics", _constant_model(1234.0, 1))
        deadline = time.monotonic() + 10
        while state.predictor.revision("analytics") != "model:1":       # the store looks again every second
            assert time.monotonic() < deadline, "the new model was never picked up"
            time.sleep(0.1)
        report2 = run_workflow(WORDCOUNT, config=cfg, stack=stack)
        assert report2.status == "succeeded"
        assert set(state.runs[report2.run_id].predicted.values()) == {1.234}
        assert len(load_rows(cfg.resolved_lifetime_data, "analytics")) == 2 * len(rows)


def _rows(path: Path, runs: int) -> None:
    import random

    from lifetime_model import Row, append_rows

    rng = random.Random(3)
    append_rows(path, "gen", [Row(f"s/r-{r}", "gen/1", f"o{o}", (o % 3, 1, 1 + o, 1 + o % 2, 2, o / 2, 0), 10,
                                  100.0 * (1 + o % 2) + rng.gauss(0, 5)) for r in range(runs) for o in range(6)])


def test_train_cli_installs_a_model_and_reports_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.cli import main

    _rows(tmp_path / "data", 20)
    models = tmp_path / "models"
    assert main(["train", "--data", str(tmp_path / "data"), "--models", str(models), "--epochs", "60",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    gen = out["categories"]["gen"]
    assert gen["replaced"] and Path(gen["path"]) == models / "gen.npz"
    assert gen["candidate"]["test"]["accuracy"] is not None


@pytest.mark.parametrize("argv, message", [
    (["train", "--data", "{tmp}/none"], "no dataset in"),
    (["train", "--data", "{tmp}", "--category", "../x"], "cannot name a dataset"),
    (["train", "--data", "{tmp}", "--category", "nothing"], "no dataset for category 'nothing'"),
    (["collect", "--runs", "0"], "--runs must be at least 1"),
    (["collect", "--examples", "nope"], "unknown example nope"),
    (["bench", "lifetime", "--repeat", "0"], "--repeat must be at least 1"),
    (["bench", "lifetime", "--unseen-fan-outs", "a"], "--unseen-fan-outs and --unseen-sizes take numbers"),
    (["collect", "--param", "mappers=2"], "--param and --text-share vary one example, got 3"),
    (["collect", "--examples", "wordcount", "--param", "mappers=x"], "--param 'mappers=x': give NAME=V1,V2"),
    (["collect", "--examples", "video", "--text-share", "2"], "text shares apply to wordcount only"),
])
def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                               message: str) -> None:
    from sdk.cli import main

    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.slow
def test_collect_then_bench_lifetime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.cli import main

    data = tmp_path / "data"
    assert main(["collect", "--runs", "1", "--examples", "wordcount", "--data", str(data),
                 "--state-dir", str(tmp_path / "s"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["runs"] == {"succeeded": 1, "failed": 0} and out["rows"]["analytics"] > 0
    assert main(["bench", "lifetime", "--examples", "wordcount", "--grouping-examples", "wordcount", "--repeat", "1",
                 "--data", str(data), "--state-dir", str(tmp_path / "s"), "--json"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(r["frag_mb_s_by_config"]) == {"model", "heuristic", "expiry_model", "nogroup"}
    assert r["predict_us"] > 0 and "analytics" in r["per_category"] and r["frag_mb_s"] >= 0
    assert set(r["grouping"]["wordcount"]) == {"funcstore", "funcstore:expiry", "funcstore:nogroup"}
    for part in ("seen", "unseen"):
        assert {n: set(r[part][n]) >= {"mae_ms", "accuracy", "strict_accuracy"}
                for n in ("mlp", "lookup", "constant", "heuristic")} == dict.fromkeys(
            ("mlp", "lookup", "constant", "heuristic"), True)


def _finished_fig9_run(fig9: Path):
    from metadata_server import CoreDriver

    d = CoreDriver(block_size=1000)
    key = d.register(fig9)
    d.capacity("s0", 64)
    r = d.start(key)
    d.put(r, "", "in2", 100)
    d.get(r, "F2", "in2")
    d.put(r, "F2", "b1", 70)
    d.put(r, "F2", "b2", 80)
    d.advance(1.0)
    d.get(r, "F4", "b1")
    d.put(r, "F4", "d", 10)
    d.end(r)
    return d.state.runs[r]


@pytest.mark.slow
def test_retrain_every_n_runs_trains_in_the_background(tmp_path: Path, fig9_path: Path) -> None:
    import random

    from lifetime_model import Row, append_rows, load_model, model_path
    from metadata_server import LifetimeRecorder, rows_of_run

    rng = random.Random(5)
    append_rows(tmp_path / "data", "paper", [Row(f"old/r-{r}", "fig9/9", f"o{o}", (3, 1, 1 + o, 1, 2, 0, 0), 10,
                                                 200.0 * (1 + o) + rng.gauss(0, 5))
                                             for r in range(12) for o in range(3)])
    rec = LifetimeRecorder(tmp_path / "data", models_dir=tmp_path / "models", retrain_every=2)
    run = _finished_fig9_run(fig9_path)
    rec(run)
    assert rec.retrains == {}                          # 1 of 2 runs
    rec(run)
    assert set(rec.retrains) == {"paper"}
    rec.wait(300)
    assert rec.retrains["paper"].returncode == 0
    assert load_model(model_path(tmp_path / "models", "paper")).version == 1
    mine = [r for r in load_rows(tmp_path / "data", "paper") if r.run.startswith(rec.session + "/")]
    assert len(mine) == 2 * len(rows_of_run(run, "x")) and {r.object for r in mine} == {"b1"}
