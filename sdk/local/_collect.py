"""Running the examples many times with varied inputs, sizes and fan-outs, to record
lifetime datasets (``funcsion collect``) and to measure grouping (``funcsion bench
lifetime``). Every run goes through one embedded stack, whose metadata server records
each successful run's lifetimes (``metadata_server.attach_lifetimes``).

``VARIANTS`` lists, per example, the parameter sets runs cycle through: different
fan-outs (a different graph: features change) and input sizes (the same graph, other
lifetimes). Word count also varies its text: a seeded share (40-100%) of its default
input per run, written to a file in the state directory. ``grid`` replaces the variants
with every combination of given parameter values (and word count's text shares, where a
share above 1 repeats the text): what the generalisation split of ``funcsion bench
lifetime`` needs, runs at fan-outs and input sizes chosen so some are never trained on.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from funcsion_rpc.errors import InvalidRequest

__all__ = ["EXAMPLES", "VARIANTS", "Variant", "examples", "grid", "plan", "collect_runs"]

_ROOT = Path(__file__).resolve().parents[2] / "examples"
#: name -> WDS file
EXAMPLES = {"wordcount": _ROOT / "wordcount" / "wordcount.wds.json",
            "gg_compile": _ROOT / "gg_compile" / "gg_compile.wds.json",
            "video": _ROOT / "video" / "video.wds.json",
            "features": _ROOT / "features" / "features.wds.json"}
VARIANTS: dict[str, tuple[dict[str, int], ...]] = {
    "wordcount": ({"mappers": 4, "reducers": 2}, {"mappers": 6, "reducers": 3}, {"mappers": 3, "reducers": 2}),
    "gg_compile": ({"units": 8, "funcs": 12}, {"units": 6, "funcs": 8}, {"units": 10, "funcs": 16}),
    "video": ({"segments": 6, "seconds": 4}, {"segments": 4, "seconds": 3}, {"segments": 8, "seconds": 4}),
    "features": ({"shards": 8, "parts": 4}, {"shards": 6, "parts": 3}, {"shards": 10, "parts": 4}),
}


@dataclass(frozen=True)
class Variant:
    example: str
    params: dict[str, int]
    text_share: float = 1.0          # word count: the share of its default text


def examples(spec: str) -> list[str]:
    """``wordcount,gg_compile,video`` -> names, or InvalidRequest naming the unknown ones."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    bad = [n for n in names if n not in EXAMPLES]
    if bad or not names:
        raise InvalidRequest(f"unknown example {', '.join(bad) or '(none given)'}: choose from {', '.join(EXAMPLES)}")
    return names


def grid(example: str, values: Mapping[str, Sequence[int]], shares: Sequence[float] = ()) -> list[Variant]:
    """Every combination of ``values`` (parameter -> values, the others at the example's
    defaults) and, for word count, of the text ``shares`` (of its default text; above 1 the
    text repeats)."""
    import itertools

    bad = [s for s in shares if not 0 < s <= 16]
    if bad:
        raise InvalidRequest(f"text shares must lie in (0, 16], got {bad}")
    if shares and example != "wordcount":
        raise InvalidRequest(f"text shares apply to wordcount only, not {example}")
    names = sorted(values)
    out = []
    for combo in itertools.product(*(values[n] for n in names)):
        for share in shares or (None,):
            out.append(Variant(example, dict(zip(names, combo)), share if share is not None else 1.0))
    return out


def plan(names: Sequence[str], runs: int, seed: int = 0,
         grids: dict[str, list[Variant]] | None = None) -> list[Variant]:
    """``runs`` runs of each example, cycling through its variants (or its ``grids`` entry),
    in interleaved order. Word count's text share is drawn per run (40-100%), a grid's is
    its own."""
    rng = random.Random(seed)
    out = []
    for i in range(runs):
        for n in names:
            g = (grids or {}).get(n)
            if g:
                out.append(g[i % len(g)])
                continue
            v = VARIANTS[n][i % len(VARIANTS[n])]
            out.append(Variant(n, dict(v), round(rng.uniform(0.4, 1.0), 2) if n == "wordcount" else 1.0))
    return out


def _wordcount_text(state_dir: Path, share: float) -> dict[str, str]:
    from sdk.local._inputs import default_inputs

    text = str(default_inputs(EXAMPLES["wordcount"])["raw_text"])
    path = state_dir / "collect-inputs" / f"wordcount-{int(share * 100)}.txt"
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.write_text((text * math.ceil(share))[: int(len(text) * share)])
        path.chmod(0o600)
    return {"raw_text": str(path)}


def collect_runs(stack: Any, config: Any, variants: Sequence[Variant], *, policy: str = "funcstore",
                 on_run: Callable[[Variant, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run every variant on ``stack``; returns the run reports (dicts). A failed run is
    reported to ``on_run`` like the others and does not stop the rest."""
    from sdk.local._executor import ExecutorOptions
    from sdk.local._inputs import prepare_run
    from sdk.local._run import run_workflow

    opts = ExecutorOptions(progress=False)
    reports = []
    for v in variants:
        inputs = _wordcount_text(Path(config.state_dir), v.text_share) if v.example == "wordcount" else None
        prep = prepare_run(EXAMPLES[v.example], inputs=inputs, params=v.params, options=opts,
                           limits=config.wds_limits())
        d = run_workflow(prep, config=config, stack=stack, policy=policy, options=opts).to_dict()
        reports.append(d)
        if on_run is not None:
            on_run(v, d)
    return reports
