"""``funcsion bench lifetime``: how well lifetimes are predicted and what grouping by them
buys. Reports, per category, FuncStore's accuracy (a prediction lies in the 95% interval
of that object's lifetimes across runs) and the mean absolute error of the served model
on the test runs of the dataset (its held-out 10%; beside it the heuristic's on the
same rows, and ``feature_ceiling``: the median lifetime per feature vector, about the
best any predictor of the seven features can do, ``funcstore_feature_ceiling`` the same
for FuncStore's five), the prediction time per object (``predict_us``: a whole workflow in one
numpy pass, as the server does at registration), and the fragmentation (allocated minus
live bytes over time, ``frag_mb_s``, from the metadata server's accounting) of the
examples run on one embedded stack under funcstore grouped by the model's lifetimes, by
the heuristic's, by predicted expiry (model) and with no grouping. ``--json`` prints one
JSON object as the last line.

Beside the model, on the same held-out rows (``sdk.cli._bench_predictors``): a constant
per workflow, the per-stage median lookup and the heuristic, each with FuncStore's
accuracy, a strict accuracy (within 25% of the object's median lifetime) and MAE
(``per_category.<c>.predictors``); and the generalisation split (``seen``, ``unseen``,
``generalisation``): an MLP and the baselines trained on word count runs of some fan-outs
and input sizes, scored on held-out runs of those and on runs of fan-outs and sizes never
trained on. The runs carry their input size (``start_run``'s ``input_bytes``): the MLP takes
it (``generalisation.mlp_inputs``) and ``lookup`` is the median per stage and input size
(``stage_lookup`` per stage only); ``generalisation.mlp_mae_below_lookup`` is
``1 - MLP MAE / lookup MAE`` on the unseen runs."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["HELP", "add_arguments", "run", "CONFIGS"]

HELP = "lifetime prediction: accuracy, MAE, prediction time, and fragmentation with and without grouping"
#: configuration -> (policy, predictor: "model" | "heuristic")
CONFIGS = {"model": ("funcstore", "model"), "heuristic": ("funcstore", "heuristic"),
           "expiry_model": ("funcstore:expiry", "model"), "nogroup": ("funcstore:nogroup", "heuristic")}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--data", default=None,
                   help="datasets to score the models on (default: lifetime_data, <state_dir>/lifetimes, "
                        "then the ones shipped in lifetime_model/datasets)")
    p.add_argument("--models", default=None,
                   help="model directory (default: lifetime_models, then the models shipped with funcsion)")
    p.add_argument("--state-dir", default=None, help="state directory for --data/--models defaults (.funcsion)")
    p.add_argument("--examples", default="wordcount,gg_compile,video", help="examples to run for fragmentation")
    p.add_argument("--repeat", type=int, default=3, help="runs of each example per configuration (default 3)")
    p.add_argument("--generalisation-data", default=None,
                   help="datasets of runs at many fan-outs and input sizes for the seen/unseen split (default: "
                        "the ones shipped in lifetime_model/datasets/generalisation)")
    p.add_argument("--generalisation-category", default="analytics", help="its category (default analytics)")
    p.add_argument("--unseen-fan-outs", default="12,32",
                   help="fan-outs held out of training (default 12,32: word count's mappers)")
    p.add_argument("--unseen-sizes", default="6,16",
                   help="input sizes held out of training, as multiples of the dataset's smallest (default 6,16)")
    p.add_argument("--epochs", type=int, default=600, help="training epochs of the split's MLP (default 600)")
    p.add_argument("--no-fragmentation", action="store_true",
                   help="only score the predictors; skip the runs that measure fragmentation and grouping")
    p.add_argument("--grouping-examples", default="wordcount,gg_compile,video,features",
                   help="examples to measure grouping's storage functions on (features: where stages mix lifetimes)")


def run(args: argparse.Namespace) -> int:
    from funcsion_rpc.errors import InvalidRequest
    from lifetime_model import BUNDLED_MODELS, ModelPredictor, ModelStore
    from metadata_server import HeuristicPredictor
    from sdk._config import Config
    from sdk.local._collect import examples

    if args.repeat < 1:
        raise InvalidRequest(f"--repeat must be at least 1, got {args.repeat}")
    split = _split_args(args)
    names = examples(args.examples)
    cfg = Config.load(state_dir=args.state_dir, lifetime_data=args.data, lifetime_models=args.models)
    dirs = [cfg.resolved_lifetime_models, BUNDLED_MODELS]
    predictor = ModelPredictor(ModelStore(dirs, check_s=3600.0), HeuristicPredictor())
    t0 = time.monotonic()
    result: dict[str, Any] = {"models": [str(d) for d in dirs], "data": str(cfg.resolved_lifetime_data)}
    result |= _accuracy(predictor, cfg.resolved_lifetime_data, names)
    result |= _generalisation(args, *split)
    result["predict_us"], result["heuristic_predict_us"] = _predict_time(predictor, names)
    if not args.no_fragmentation:
        from ._bench_grouping import bench_keys

        result |= _fragmentation(predictor, names, args.repeat)
        result |= bench_keys(predictor, examples(args.grouping_examples), args.repeat)
    result["bench_s"] = round(time.monotonic() - t0, 1)
    _print(result)
    if "grouping" in result:
        from ._bench_grouping import print_grouping

        print_grouping(result)
    if args.json:
        print(json.dumps(result))
    return 0


def _split_args(args: argparse.Namespace) -> tuple[list[int], list[float]]:
    from funcsion_rpc.errors import InvalidRequest

    try:
        fans = [int(v) for v in args.unseen_fan_outs.split(",") if v.strip()]
        sizes = [float(v) for v in args.unseen_sizes.split(",") if v.strip()]
    except ValueError:
        raise InvalidRequest(f"--unseen-fan-outs and --unseen-sizes take numbers separated by commas, got "
                             f"{args.unseen_fan_outs!r} and {args.unseen_sizes!r}") from None
    if args.epochs < 1:
        raise InvalidRequest(f"--epochs must be at least 1, got {args.epochs}")
    return fans, sizes


def _generalisation(args: argparse.Namespace, fans: list[int], sizes: list[float]) -> dict[str, Any]:
    """``seen`` and ``unseen``: every predictor trained on the runs of seen fan-outs and input
    sizes, scored on their test runs and on the runs of the held-out ones."""
    from sdk.cli._bench_predictors import GENERALISATION_DATA, generalisation

    data = Path(args.generalisation_data) if args.generalisation_data else GENERALISATION_DATA
    g = generalisation(data, args.generalisation_category, fans, sizes, args.epochs)
    u = g["unseen"]
    g["mlp_mae_below_lookup"] = (round(1.0 - u["mlp"]["mae_ms"] / u["lookup"]["mae_ms"], 4)
                                 if u["mlp"]["mae_ms"] is not None and u["lookup"]["mae_ms"] else None)
    return {"seen": g.pop("seen"), "unseen": g.pop("unseen"), "generalisation": g}  # unseen_fan_out, _size, _both


def _categories(names: list[str]) -> dict[str, str]:
    """example -> its category (from its WDS)."""
    import wds
    from sdk.local._collect import EXAMPLES

    return {n: wds.load(EXAMPLES[n]).category for n in names}


def _accuracy(predictor: Any, data: Path, names: list[str]) -> dict[str, Any]:
    from lifetime_model import BUNDLED_DATASETS, DatasetError, feature_ceiling, intervals, load_rows, score, split_by_run
    from lifetime_model._train import evaluate
    from metadata_server import HeuristicPredictor
    from sdk.cli._bench_predictors import by_run

    heuristic = HeuristicPredictor()
    per: dict[str, Any] = {}
    for cat in sorted(set(_categories(names).values())):
        model = predictor.store.get(cat)
        entry: dict[str, Any] = {"model_version": model.version if model else None}
        rows, src = [], data
        for src in (data, BUNDLED_DATASETS):              # then the datasets the shipped models came from
            try:
                rows = load_rows(src, cat)
                break
            except DatasetError:
                continue
        test = split_by_run(rows)[2] if rows else []
        if model is not None and test:
            bounds = intervals(rows)
            s = evaluate(model, test, bounds)
            h = score(test, [heuristic.predict(_info(r)) * 1000.0 for r in test], bounds)
            entry |= {"source": f"{len(test)} test rows of {src / (cat + '.csv')}", **s.to_dict(),
                      "predictors": by_run(rows, model),
                      "heuristic_accuracy": h.accuracy, "heuristic_mae_ms": h.mae_ms,
                      "feature_ceiling": feature_ceiling(rows).accuracy,
                      "funcstore_feature_ceiling": feature_ceiling(rows, n_features=5).accuracy}
            entry["strict_accuracy"] = entry["predictors"]["mlp"]["strict_accuracy"]   # the same rows and model
        elif model is not None:
            entry |= {"source": "the model's metadata (its own test runs)", "accuracy": model.meta.get("accuracy"),
                      "mae_ms": model.meta.get("mae_ms")}
        else:
            entry |= {"source": "no model: the heuristic serves", "accuracy": None, "mae_ms": None}
        per[cat] = entry
    accs = [e["accuracy"] for e in per.values()]
    maes = [e["mae_ms"] for e in per.values() if e["mae_ms"] is not None]
    return {"accuracy": min(accs) if accs and None not in accs else None,
            "mae_ms": round(sum(maes) / len(maes), 3) if maes else None, "per_category": per}


def _info(row: Any) -> Any:
    import hdag

    return hdag.ObjectInfo(row.object, "x", ("y",), (), hdag.Features(*row.features))


def _predict_time(predictor: Any, names: list[str]) -> tuple[float, float]:
    """Microseconds per object to predict every object of each example's graph at once."""
    import hdag
    import wds
    from metadata_server import HeuristicPredictor, predict_lifetimes
    from sdk.local._collect import EXAMPLES

    graphs = [hdag.build(wds.load(EXAMPLES[n])) for n in names]
    out = []
    for p in (predictor, HeuristicPredictor()):
        objects = 0
        start = time.perf_counter()
        for _ in range(50):
            for g in graphs:
                objects += len(predict_lifetimes(p, g))
        out.append(round((time.perf_counter() - start) / max(objects, 1) * 1e6, 3))
    return out[0], out[1]


def _fragmentation(predictor: Any, names: list[str], repeat: int) -> dict[str, Any]:
    from metadata_server import HeuristicPredictor
    from sdk._config import Config
    from sdk.local._collect import VARIANTS, Variant, collect_runs
    from sdk.local._stack import Stack

    cfg = Config.load(state_dir=tempfile.mkdtemp(prefix="funcsion-bench-lifetime-"), env={})
    block_size = cfg.block_size
    frag: dict[str, dict[str, float]] = {c: {n: 0.0 for n in names} for c in CONFIGS}
    alloc: dict[str, float] = {c: 0.0 for c in CONFIGS}
    with Stack(cfg, metadata_port=0, daemon_port=0) as stack:
        state = stack.handler.state
        for _ in range(repeat):                          # interleaved: drift hits every configuration alike
            for conf, (policy, which) in CONFIGS.items():
                state.predictor = predictor if which == "model" else HeuristicPredictor()
                for n in names:
                    (d,) = collect_runs(stack, stack.config, [Variant(n, dict(VARIANTS[n][0]))], policy=policy)
                    if d["status"] != "succeeded":
                        from funcsion_rpc.errors import InvalidRequest
                        raise InvalidRequest(f"{n} under {policy} ({which}) failed: {d.get('error')}")
                    s = state.runs[d["run_id"]].summary()
                    frag[conf][n] += (s["allocated_mb_s"] - s["live_mb_s"]) / repeat
                    alloc[conf] += s["allocated_mb_s"] / repeat
    total = {c: round(sum(v.values()), 4) for c, v in frag.items()}
    return {"block_size": block_size, "repeat": repeat, "frag_mb_s": total["model"],
            "frag_mb_s_by_config": total, "allocated_mb_s_by_config": {c: round(v, 4) for c, v in alloc.items()},
            "frag_mb_s_per_example": {c: {n: round(v, 4) for n, v in per.items()} for c, per in frag.items()},
            "model_vs_nogroup": round(total["model"] / total["nogroup"], 4) if total["nogroup"] else None,
            "expiry_vs_lifetime": round(total["expiry_model"] / total["model"], 4) if total["model"] else None}


def _print(r: dict[str, Any]) -> None:
    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{v * 100:.1f}%"

    for cat, e in r["per_category"].items():
        mae = "n/a" if e["mae_ms"] is None else f"{e['mae_ms']:.1f} ms"
        extra = (f" (heuristic {pct(e['heuristic_accuracy'])}, best any predictor of the 7 features does "
                 f"{pct(e['feature_ceiling'])}, of FuncStore's 5 {pct(e['funcstore_feature_ceiling'])})"
                 if "heuristic_accuracy" in e else "")
        print(f"{cat:<10} accuracy {pct(e['accuracy'])}{extra}, MAE {mae}  [{e['source']}]")
        if "predictors" in e:
            _table(f"{cat} test runs", e["predictors"])
    g = r["generalisation"]
    print(f"generalisation ({g['data']}): trained on fan-outs {g['split']['fan_outs_seen']} and input sizes "
          f"{g['split']['sizes_seen']} (times the smallest), held out fan-outs {g['split']['fan_outs_unseen']} "
          f"and sizes {g['split']['sizes_unseen']}; the MLP takes {', '.join(g['mlp_inputs'])}")
    _table("seen", r["seen"])
    _table("unseen", r["unseen"])
    for part in ("unseen_fan_out", "unseen_size", "unseen_both"):
        if g.get(part, {}).get("rows"):
            _table(part.replace("_", " ", 1).replace("_", "-"), g[part])
    if g["mlp_mae_below_lookup"] is not None:
        print(f"  unseen: the MLP's MAE is {g['mlp_mae_below_lookup'] * 100:.1f}% below the lookup's")
    print(f"prediction: {r['predict_us']:.2f} us per object (heuristic {r['heuristic_predict_us']:.2f} us)")
    if "frag_mb_s_by_config" not in r:
        return
    print(f"fragmentation (allocated - live, MB*s, {r['block_size'] >> 10} KiB blocks, mean of {r['repeat']} runs "
          "per example): " + ", ".join(f"{c} {v:.3f}" for c, v in r["frag_mb_s_by_config"].items()))


def _table(title: str, part: dict[str, Any]) -> None:
    from sdk.cli._bench_predictors import NAMES

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{v * 100:.1f}%"

    print(f"  {title} ({part['rows']} rows, {part['runs']} runs): "
          + "; ".join(f"{n} {pct(part[n]['accuracy'])} / strict {pct(part[n]['strict_accuracy'])} / "
                      f"MAE {part[n]['mae_ms']:.1f} ms" for n in (*NAMES, "other_runs") if part.get(n)))
