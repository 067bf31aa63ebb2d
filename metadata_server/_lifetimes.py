"""Lifetime prediction at the metadata server: serve trained models (with the heuristic
for categories that have none), record every finished run's measured lifetimes into the
per-category datasets, and retrain in the background every N recorded runs.

``attach_lifetimes(handler, ...)`` wires it: the state's predictor becomes a
``lifetime_model.ModelPredictor`` over the model directories (first match wins, files
re-read when they change), and a ``LifetimeRecorder`` observes finished runs. A run
that succeeded under ``funcstore`` adds one row per object its last reader's commit
freed (``lifetime_model._dataset`` documents the format), the run named
``<session>/<run id>`` with a session per recorder so runs of different servers stay
apart. With ``retrain_every`` N > 0 every N-th recorded run of a category starts
``python -m lifetime_model retrain`` for it in a child process (one at a time per
category; the new model replaces the old only when more accurate on held-out runs,
and the store picks it up). Training needs torch; without it retraining is off and
says so once. ``expires_at_ms`` is the predicted expiry a put grant carries to the
client, which passes it to the storage daemon with the PUT. I/O only here; the core
stays pure.
"""

from __future__ import annotations

import importlib.util
import logging
import secrets
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lifetime_model import ModelPredictor, ModelStore, Row, append_rows, check_category
from lifetime_model.exceptions import DatasetError

from ._policy import HeuristicPredictor
from ._records import ObjectRecord, RunRecord

__all__ = ["LifetimeRecorder", "attach_lifetimes", "expires_at_ms", "rows_of_run"]

log = logging.getLogger("funcsion.lifetime")


def rows_of_run(run: RunRecord, session: str) -> list[Row]:
    """The dataset rows of a finished run: one per object its last reader freed, with its
    features for the run's concurrency (the wave features depend on it), the run's input
    size (``start_run``'s ``input_bytes``) and its width (its graph's widest stage)."""
    rows = []
    feats = run.graph.features_at(run.concurrency)
    for name, (seconds, size) in sorted(run.measured.items()):
        f = feats.get(name)
        if f is None:
            continue
        rows.append(Row(f"{session}/{run.run_id}", run.workflow_key, name, f.vector(), size,
                        round(seconds * 1000.0, 3), run.input_bytes, run.graph.width))
    return rows


def expires_at_ms(run: RunRecord, rec: ObjectRecord | None) -> int | None:
    """When the object is predicted to be freed, in ms of the server's clock (Unix time
    unless a test injects another): its put's time plus its predicted lifetime. None when
    nothing frees it at a predicted time: a policy that does not free on commit, an object
    without a prediction (a workflow input, an ad-hoc key), a workflow output or persisted
    object (kept), or one not in function memory (no daemon PUT to tell)."""
    if rec is None or not run.policy.frees_on_commit or rec.keep or rec.adhoc or rec.placement.tier != "memory":
        return None
    predicted = run.predicted.get(rec.name)
    if predicted is None:
        return None
    return int(round((rec.written_at + max(predicted, 0.0)) * 1000.0))


class LifetimeRecorder:
    """A run observer (``MetadataHandler.add_run_observer``) that appends lifetimes."""

    def __init__(self, data_dir: str | Path, *, models_dir: str | Path | None = None, retrain_every: int = 0,
                 session: str | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.models_dir = Path(models_dir) if models_dir is not None else None
        self.retrain_every = retrain_every if self.models_dir is not None else 0
        self.session = session or secrets.token_hex(4)
        self.recorded: dict[str, int] = {}           # category -> runs recorded by this recorder
        self.rows = 0
        self.retrains: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._no_torch_said = False

    def __call__(self, run: RunRecord) -> None:
        if run.state != "ended" or run.outcome != "succeeded" or not run.policy.frees_on_commit:
            return
        category = run.graph.workflow.category
        try:
            check_category(category)
        except DatasetError as exc:
            log.warning("not recording lifetimes of run %s: %s", run.run_id, exc)
            return
        rows = rows_of_run(run, self.session)
        if not rows:
            return
        with self._lock:
            self.rows += append_rows(self.data_dir, category, rows)
            n = self.recorded[category] = self.recorded.get(category, 0) + 1
            if self.retrain_every and n % self.retrain_every == 0:
                self._retrain(category)

    def _retrain(self, category: str) -> None:
        if importlib.util.find_spec("torch") is None:
            if not self._no_torch_said:
                self._no_torch_said = True
                log.warning("retrain_every is set but torch is not installed (pip install 'funcsion[model]'): "
                            "lifetime models are not retrained")
            return
        running = self.retrains.get(category)
        if running is not None and running.poll() is None:
            return                       # the one before is still training: the next N runs ask again
        assert self.models_dir is not None
        cmd = [sys.executable, "-m", "lifetime_model", "retrain", "--category", category,
               "--data", str(self.data_dir), "--models", str(self.models_dir)]
        self.retrains[category] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                   stdin=subprocess.DEVNULL)
        log.info("retraining the lifetime model of %s after %d runs", category, self.recorded[category])

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for the retraining children (tests, shutdown)."""
        for p in list(self.retrains.values()):
            p.wait(timeout_s)


def attach_lifetimes(handler: Any, *, data_dir: str | Path | None, models_dirs: Sequence[str | Path],
                     retrain_every: int = 0, check_s: float = 1.0) -> LifetimeRecorder | None:
    """Serve the models of ``models_dirs`` (the first is where retraining writes) on
    ``handler``'s state and, with a ``data_dir``, record finished runs there."""
    handler.state.predictor = ModelPredictor(ModelStore(models_dirs, check_s=check_s), HeuristicPredictor())
    if data_dir is None:
        return None
    rec = LifetimeRecorder(data_dir, models_dir=models_dirs[0] if models_dirs else None,
                           retrain_every=retrain_every)
    handler.add_run_observer(rec)
    return rec
