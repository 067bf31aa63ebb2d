"""The predictor comparison of ``funcsion bench lifetime``: the MLP against a constant per
workflow, the per-stage median lookup and the server's heuristic, each fitted on the same
training runs and scored on the same held-out rows (``lifetime_model._compare``) by
FuncStore's accuracy, a strict accuracy (within 25% of the object's median lifetime) and
MAE: per category on the test runs of the datasets (``predictors``), and on the
generalisation dataset split by fan-out and input size (``seen``, ``unseen``; ``lookup``
is the per-stage and input-size table, ``stage_lookup`` the per-stage median, and
``mlp_inputs`` what the MLP took: the seven graph features and, when the runs recorded
it, the input size). Not
covered: fragmentation and timing (``bench_lifetime``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["GENERALISATION_DATA", "NAMES", "heuristic_fit", "served_fit", "by_run", "generalisation"]

#: The runs recorded for the generalisation split (``funcsion collect --param mappers=... --text-share ...``).
GENERALISATION_DATA = Path(__file__).resolve().parents[2] / "lifetime_model" / "datasets" / "generalisation"
#: The predictors, in the order they are printed.
NAMES = ("constant", "stage_lookup", "lookup", "heuristic", "mlp")

_Model = Callable[[Sequence[Any]], list[float]]


def _info(row: Any) -> Any:
    import hdag

    return hdag.ObjectInfo(row.object, "x", ("y",), (), hdag.Features(*row.features))


def heuristic_fit(train: Sequence[Any], val: Sequence[Any]) -> _Model:
    """The metadata server's heuristic (it learns nothing), in ms."""
    from metadata_server import HeuristicPredictor

    h = HeuristicPredictor()
    return lambda rows: [h.predict(_info(r)) * 1000.0 for r in rows]


def served_fit(model: Any) -> Callable[[Sequence[Any], Sequence[Any]], _Model]:
    """The served model as it is (trained by ``funcsion train`` on the same split's training runs)."""
    def fit(train: Sequence[Any], val: Sequence[Any]) -> _Model:
        return model.predict_rows  # type: ignore[no-any-return]

    return fit


def by_run(rows: Sequence[Any], model: Any) -> dict[str, Any]:
    """Every predictor on the test runs of ``rows`` (``split_by_run``); the MLP is the served ``model``."""
    from lifetime_model._compare import compare_by_run

    return compare_by_run(rows, {"heuristic": heuristic_fit, "mlp": served_fit(model)})


def generalisation(data: Path, category: str, unseen_fan_outs: Sequence[int], unseen_sizes: Sequence[float],
                   epochs: int) -> dict[str, Any]:
    """``{"data", "category", "split", "seen", "unseen"}``: an MLP trained here (torch) on
    the seen shapes' training runs, against the baselines fitted on the same rows."""
    from lifetime_model import load_rows
    from lifetime_model._compare import compare_generalisation
    from lifetime_model._split import Split
    from lifetime_model._train import mlp_fit

    rows = load_rows(data, category)
    split = Split(frozenset(unseen_fan_outs), frozenset(float(s) for s in unseen_sizes))
    fitted: list[Any] = []
    out = compare_generalisation(rows, split, {"heuristic": heuristic_fit, "mlp": mlp_fit(epochs=epochs, fitted=fitted)})
    return {"data": str(data / f"{category}.csv"), "category": category,
            "mlp_inputs": list(fitted[0].inputs) if fitted else [], **out}
