"""Serving lifetime predictions without torch: a store of model files that reloads a
category's model when its file changes, and a predictor over it that falls back to
another predictor (the metadata server's heuristic) for categories without a model.

``ModelStore`` looks a category up in its directories in order (the first that has
``<category>.npz`` wins: e.g. the state directory's trained models, then the ones
shipped with funcsion) and checks the files again at most every ``check_s``
seconds, so a model that ``funcsion train`` writes is served from the next run on,
without a restart; a file that cannot be read is logged once and the model before it
stays. ``ModelPredictor.predict_graph`` predicts every object of a workflow in one
numpy pass, for a run's concurrency and input size (a model of format 3 takes it). Not covered: training (``_train``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import hdag

from ._model_file import Mlp, load_model, model_path, run_inputs
from .exceptions import ModelFileError

__all__ = ["ModelStore", "ModelPredictor", "ObjectPredictor"]

log = logging.getLogger("funcsion.lifetime")


class ObjectPredictor(Protocol):
    def predict(self, obj: hdag.ObjectInfo) -> float:
        """Predicted lifetime in seconds."""
        ...


@dataclass(slots=True)
class _Entry:
    checked: float
    signature: tuple[str, int, int] | None       # (path, mtime_ns, size) of the file loaded
    model: Mlp | None


class ModelStore:
    """The newest readable model per category, from ``directories`` in order."""

    def __init__(self, directories: Sequence[str | Path], *, check_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directories = [Path(d) for d in directories]
        self.check_s = check_s
        self.clock = clock
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self.reloads = 0

    def get(self, category: str) -> Mlp | None:
        now = self.clock()
        with self._lock:
            e = self._entries.get(category)
            if e is not None and now - e.checked < self.check_s:
                return e.model
            if e is None:
                e = self._entries[category] = _Entry(now, None, None)
            e.checked = now
            sig = self._find(category)
            if sig == e.signature:
                return e.model
            if sig is None:                       # the file went: serve the fallback again
                e.signature, e.model = None, None
                return None
            try:
                e.model = load_model(sig[0])
                self.reloads += 1
                log.info("lifetime model for %s: version %s from %s", category, e.model.version, sig[0])
            except ModelFileError as exc:
                log.warning("%s; keeping %s", exc, "the model before it" if e.model else "the heuristic")
            except ImportError:                   # numpy: the server's `local` extra brings it
                log.warning("a lifetime model for %s is there but numpy is not installed "
                            "(pip install 'funcsion[local]'): the heuristic serves", category)
            e.signature = sig
            return e.model

    def _find(self, category: str) -> tuple[str, int, int] | None:
        for d in self.directories:
            try:
                p = model_path(d, category)
                st = os.stat(p)
            except (OSError, ModelFileError):
                continue
            return (str(p), st.st_mtime_ns, st.st_size)
        return None


class ModelPredictor:
    """Lifetimes from the category's model when there is one, else from ``fallback``."""

    def __init__(self, store: ModelStore, fallback: ObjectPredictor) -> None:
        self.store = store
        self.fallback = fallback

    def predict(self, obj: hdag.ObjectInfo) -> float:
        """One object without its workflow: the fallback (a model needs the category)."""
        return self.fallback.predict(obj)

    def revision(self, category: str) -> str:
        """What would predict for ``category`` now: ``model:<version>`` or ``heuristic``."""
        m = self.store.get(category)
        return f"model:{m.version}" if m is not None else "heuristic"

    def predict_graph(self, graph: hdag.HDAG, concurrency: int = 0, *, input_bytes: int = 0) -> dict[str, float]:
        """Seconds per object with features, every one of ``graph`` in one pass, for a run of
        ``concurrency`` tasks at once (0: unknown; the wave features depend on it) and
        ``input_bytes`` of inputs (0: unknown; a model that takes the run's inputs then gets
        their training mean, a model that does not ignores it)."""
        feats = graph.features_at(concurrency)
        named = [(n, o) for n, o in graph.objects.items() if o.features is not None]
        model = self.store.get(graph.workflow.category)
        if model is None or not named:
            return {n: self.fallback.predict(o) for n, o in named}
        import numpy as np

        run = run_inputs(input_bytes, graph.width) if model.takes_input_size else ()
        ms = model.predict_ms(np.array([(*feats[n].vector(), *run) for n, _ in named], dtype=np.float64))
        return {n: float(v) / 1000.0 for (n, _), v in zip(named, ms)}
