"""``funcsion bench utilization``: FuncStore's utilization study (Sec. V-C) on two embedded
stacks of one configuration: funcstore and the oracle on one whose storage functions hold
memory by the grain (``--memory-grain``, the config's 4 KiB page), pocket and jiffy on one whose
functions hold whole blocks (``--baseline-grain`` 0), as the block stores FuncStore compares
against do. Runs word count, gg compile and video, each alone and then all at once, under
``funcstore``, ``pocket``, ``jiffy:<lease>`` (the lease is the longest object lifetime seen
in the funcstore runs, as the paper sets it) and ``oracle``, and reports the physical
memory-time product (MB-s of what the storage functions held; pocket: its measured peak
reserved from the run's start to its end, ``sdk.local._study``) per policy and workflow,
funcstore's reductions, its distance to the oracle split into blocks held per byte held and
bytes held against the oracle's (``decomposition``), the jobs that ran concurrently within a 200/400 MB budget under the
live admission controller (``sdk.local._admission``: jobs wait until their expected peak,
the policy's median peak alone, fits), the concurrent set's completion
time under funcstore, pocket and jiffy with the stack's memory budget at 20/60/100% of the
workload's peak (pocket's), storage cost at AWS prices,
and a PNG of allocated memory over time, one line per policy (Fig. 12a), beside the JSON.
Each workflow runs alone ``--repeat`` times per policy, in interleaved rounds, and the run
with the median MB-s counts (one run's figures swing with the shared machine's load).
``--json`` prints one JSON object as the last line. The figures are ``sdk.local._study``."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from funcsion_rpc.errors import InvalidRequest

__all__ = ["HELP", "WORKFLOWS", "add_arguments", "run"]

HELP = "FuncStore's utilization study: memory-time, budget and cost of funcstore against pocket, jiffy, oracle"

_EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: study name -> WDS file
WORKFLOWS = {"wordcount": _EXAMPLES / "wordcount" / "wordcount.wds.json",
             "gg_compile": _EXAMPLES / "gg_compile" / "gg_compile.wds.json",
             "video": _EXAMPLES / "video" / "video.wds.json"}
MB = 1 << 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--workflows", default=",".join(WORKFLOWS),
                   help=f"comma-separated workflows to study (default {','.join(WORKFLOWS)})")
    p.add_argument("--out", default=".funcsion/bench", help="directory for the JSON and PNG (default .funcsion/bench)")
    p.add_argument("--quick", action="store_true",
                   help="no warm-up runs, one run each and no all-concurrent case (a smoke test, not a measurement)")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of each workflow alone per policy, interleaved; the median MB-s counts (default 3)")
    p.add_argument("--block-size", type=int, default=0,
                   help="the stack's block size in bytes (default: the config's, 1 MiB)")
    p.add_argument("--memory-grain", type=int, default=-1,
                   help="the grain funcstore's and the oracle's storage functions hold memory by, in bytes "
                        "(default: the config's, 4096; 0: whole blocks)")
    p.add_argument("--baseline-grain", type=int, default=-1,
                   help="the grain of pocket's and jiffy's stack (default: funcstore's, so that every policy "
                        "is measured in one unit; 0: whole blocks, as their block stores hold them; the "
                        "whole-block figures are reported either way, from the ledger)")
    p.add_argument("--admission-cap", type=int, default=0,
                   help="the most jobs given to the live admission controller per policy and budget "
                        "(default 0: no cap, jobs until their expected peaks add up past the budget)")


def _workflows(spec: str) -> dict[str, Path]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    bad = [n for n in names if n not in WORKFLOWS]
    if bad or not names:
        raise InvalidRequest(f"--workflows: unknown {', '.join(bad) or '(none given)'}; "
                             f"choose from {', '.join(WORKFLOWS)}")
    return {n: WORKFLOWS[n] for n in names}


def run(args: argparse.Namespace) -> int:
    from sdk._config import Config
    from sdk.local import _study
    from sdk.local._executor import ExecutorOptions
    from sdk.local._inputs import prepare_run
    from sdk.local._jobs import run_jobs
    from sdk.local._run import _store_stats, run_workflow
    from sdk.local._stack import Stack

    wfs = _workflows(args.workflows)
    if args.repeat < 1:
        raise InvalidRequest(f"--repeat must be at least 1, got {args.repeat}")
    if args.admission_cap < 0:
        raise InvalidRequest(f"--admission-cap must be 0 (no cap) or more, got {args.admission_cap}")
    if args.block_size < 0 or args.block_size & (args.block_size - 1):
        raise InvalidRequest(f"--block-size must be a power of two in bytes (e.g. 65536), got {args.block_size}")
    repeat = 1 if args.quick else args.repeat
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    opts = ExecutorOptions(progress=False)
    if args.baseline_grain < -1:
        raise InvalidRequest(f"--baseline-grain must be 0 (whole blocks) or a grain in bytes, got {args.baseline_grain}")
    sized: dict[str, Any] = {"block_size": args.block_size} if args.block_size else {}
    if args.memory_grain >= 0:
        sized["memory_grain"] = args.memory_grain
    cfg = Config.load(state_dir=tempfile.mkdtemp(prefix="funcsion-study-"), env={}, **sized)
    bgrain = cfg.memory_grain if args.baseline_grain < 0 else args.baseline_grain
    bcfg = Config.load(state_dir=tempfile.mkdtemp(prefix="funcsion-study-"), env={},
                       **{**sized, "memory_grain": bgrain})
    alone: dict[str, dict[str, dict[str, Any]]] = {}  # policy -> workflow -> report dict
    both: dict[str, dict[str, Any]] = {}  # policy -> concurrent figures
    budget: dict[str, Any] = {}
    admitted: dict[str, dict[str, Any]] = {}  # policy -> "200mb"/"400mb" -> the live controller's figures
    t0 = time.monotonic()
    with Stack(cfg, metadata_port=0, daemon_port=0) as stack, Stack(bcfg, metadata_port=0, daemon_port=0) as bstack:
        preps = {n: prepare_run(p, options=opts, limits=cfg.wds_limits()) for n, p in wfs.items()}

        def on(spec: str) -> Any:
            """The stack a policy runs on: pocket and jiffy on the baselines' (whole blocks)."""
            return bstack if _baseline(spec) else stack

        def check(d: dict[str, Any], what: str) -> None:
            if d["status"] != "succeeded":
                raise InvalidRequest(f"{what} failed: {d['error']}")

        oracle_reruns = [0]

        def oracle_again(go: Any, spec: str) -> Any:
            """The oracle frees an object at its last declared reader's lookup, so it cannot
            serve a reader whose attempt failed after that lookup and was retried (a task
            failure under load; ObjectExpired): such a run is repeated, up to 3 times, and
            counted (``oracle_reruns``)."""
            for _ in range(3):
                try:
                    return go()
                except InvalidRequest as exc:
                    if spec != "oracle" or "ObjectExpired" not in str(exc):
                        raise
                    oracle_reruns[0] += 1
            return go()

        def once(name: str, policy: str) -> dict[str, Any]:
            def go() -> dict[str, Any]:
                st = on(policy)
                before = _store_stats(st.endpoints) or {}
                d = _reserve(run_workflow(preps[name], config=st.config, stack=st, policy=policy,
                                          options=opts).to_dict())
                check(d, f"{name} under {policy}")
                d["store"] = _study.store_deltas(before, _store_stats(st.endpoints) or {})
                return d
            return oracle_again(go, policy)  # type: ignore[no-any-return]

        warm = [once(n, "funcstore") for n in wfs] if not args.quick else []  # cold starts skew the first
        if not args.quick:
            for n in wfs:
                once(n, "pocket")  # the baselines' stack, warmed alike
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {}  # policy -> workflow -> its runs

        def rounds(pols: dict[str, str]) -> None:
            """``repeat`` rounds, each running every workflow under every policy in turn, so
            that the machine's load drifts over all policies alike (jiffy with the lease
            as it stands, doubled when a run outlives it)."""
            for _ in range(repeat):
                for name, spec in pols.items():
                    for n in wfs:
                        d = with_lease(lambda s, n=n: once(n, s)) if name == "jiffy" else once(n, spec)
                        runs.setdefault(name, {}).setdefault(n, []).append(d)

        lease = _study.lease_ms([*warm, *(once(n, "funcstore") for n in wfs)])
        leases = [lease]

        def with_lease(go: Any) -> Any:
            """Jiffy frees an object idle for its lease: a lease shorter than this run's
            lifetimes fails a task (ObjectExpired). Double it and run again, up to 4 times;
            every lease tried is reported."""
            for _ in range(4):
                try:
                    return go(f"jiffy:{leases[-1]}")
                except InvalidRequest as exc:
                    if "ObjectExpired" not in str(exc):
                        raise
                    leases.append(leases[-1] * 2)
            return go(f"jiffy:{leases[-1]}")

        rounds({"funcstore": "funcstore", "pocket": "pocket", "jiffy": "jiffy", "oracle": "oracle"})
        policies = {"funcstore": "funcstore", "pocket": "pocket", "jiffy": f"jiffy:{leases[-1]}", "oracle": "oracle"}
        alone.update({pol: {n: _study.median_run(ds) for n, ds in by_wf.items()} for pol, by_wf in runs.items()})

        def concurrently(spec: str, jobs: list[str] | None = None, admission: Any = None,
                         peaks: list[int] | None = None) -> dict[str, Any]:
            def go() -> dict[str, Any]:
                st = on(spec)
                before = _store_stats(st.endpoints) or {}
                start = time.monotonic()
                names = jobs if jobs is not None else list(wfs)
                reps = [_reserve(r.to_dict()) for r in run_jobs([preps[n] for n in names], config=st.config,
                                                                  stack=st, policy=spec, options=opts,
                                                                  admission=admission, peaks=peaks)]
                for n, d in zip(names, reps):
                    check(d, f"{n} under {spec}, concurrently")
                return {"wall_s": round(time.monotonic() - start, 4), "reports": reps, "spec": spec,
                        "store": _study.store_deltas(before, _store_stats(st.endpoints) or {})}
            return oracle_again(go, spec)  # type: ignore[no-any-return]

        if not args.quick and len(wfs) > 1:
            for pol in ("funcstore", "pocket", "oracle"):
                both[pol] = concurrently(pol)
            both["jiffy"] = with_lease(concurrently)
            budget = _budget_sweep(on, both, {p: policies[p] for p in ("funcstore", "pocket", "jiffy")},
                                   lambda spec: with_lease(concurrently) if spec.startswith("jiffy") else concurrently(spec))
            for pol in policies:
                expected = [(n, int(alone[pol][n]["memory"]["peak_bytes"])) for n in wfs]
                for mb in (200, 400):
                    admitted.setdefault(pol, {})[f"{mb}mb"] = _admit(
                        on(policies[pol]).handler.state, pol, expected, mb * MB, args.admission_cap,
                        lambda jobs, adm, pk, pol=pol: with_lease(lambda s: concurrently(s, jobs, adm, pk))
                        if pol == "jiffy" else concurrently(policies[pol], jobs, adm, pk))
    result = _figures(wfs, policies, alone, both, leases, time.monotonic() - t0, cfg.block_size, repeat)
    result["memory_grain"], result["baseline_grain"] = cfg.memory_grain, bcfg.memory_grain
    result["oracle_reruns"] = oracle_reruns[0]
    if both:
        result["budget_completion"] = budget
    if admitted:
        result["admission"] = admitted
        for mb in (200, 400):
            result[f"max_jobs_computed_{mb}mb"] = result[f"max_jobs_{mb}mb"]
            result[f"max_jobs_{mb}mb"] = {pol: a[f"{mb}mb"]["max_concurrent"] for pol, a in admitted.items()}
    png = out / "utilization.png"
    if _plot(png, wfs, policies, alone, both):
        result["png"] = str(png)
    (out / "utilization.json").write_text(json.dumps(result, indent=1) + "\n")
    _print_table(result)
    if args.json:
        print(json.dumps(result))
    return 0


def _reserve(d: dict[str, Any]) -> dict[str, Any]:
    """A report under ``pocket`` charged as Pocket reserves: its physical peak from the run's
    start to its end (``mb_s``, ``series``); what it allocated at write stays under
    ``alloc_mb_s``/``alloc_series``. Other policies' reports are returned as they are."""
    from sdk.local import _study

    mem = d["memory"]
    if d.get("policy") != "pocket" or "alloc_mb_s" in mem:
        return d
    peak = int(mem["peak_bytes"])
    mem["alloc_mb_s"], mem["alloc_series"] = mem["mb_s"], mem["series"]
    mem["mb_s"] = _study.reserved_mb_s(peak, float(d["wall_s"]))
    if "peak_block_bytes" in mem:        # the same reservation in whole blocks
        mem["alloc_block_mb_s"] = mem.get("block_mb_s")
        mem["block_mb_s"] = _study.reserved_mb_s(int(mem["peak_block_bytes"]), float(d["wall_s"]))
    mem["series"] = _study.reserved_series(peak, float(d["wall_s"]))
    mem["charged_as"] = "pocket reservation: the physical peak from the run's start to its end"
    return d


def _admit(state: Any, reps_policy: str, expected: list[tuple[str, int]], budget: int, cap: int,
           go: Any) -> dict[str, Any]:
    """The live admission controller under ``budget`` bytes: jobs cycling over the workflows
    (``_study.admission_jobs``: until one must wait, at most ``cap`` when positive) run
    concurrently, each waiting for its expected peak to fit, with the stack's memory budget
    (the metadata server's ``memory_budget``) at the same bytes, so jobs that outgrow their
    expected peak (many at once on a loaded machine stretch their lifetimes) overflow to COS
    instead of past the budget (FuncStore Fig. 11; not under ``oracle``, whose peaks are bytes
    held while the stack's budget counts blocks). How many ran at once, the physical peak
    they held together (their series summed on one clock; pocket: what it allocated, not its
    reservation) against the budget, the objects that overflowed, and every job's leaked bytes."""
    from sdk.local import _study
    from sdk.local._admission import Admission

    jobs = _study.admission_jobs(expected, budget, cap)
    if not jobs:
        return {"jobs": 0, "max_concurrent": 0}
    adm = Admission(budget)
    saved, spilled = state.memory_budget, int(state.counters.get("spilled_to_cos", 0))
    if reps_policy != "oracle":      # the oracle's peaks are bytes held; the stack's budget counts blocks
        state.memory_budget = budget
    try:
        r = go([n for n, _ in jobs], adm, [p for _, p in jobs])
    finally:
        state.memory_budget = saved
    reps = r["reports"]
    t0 = min(float(d["started"]) for d in reps)       # a job that waited starts later: on one clock
    physical = max((v for _, v in _study.summed_series(
        [[[float(t) + float(d["started"]) - t0, *rest] for t, *rest in d["memory"].get("alloc_series",
                                                                                       d["memory"]["series"])]
         for d in reps], 2 if reps[0].get("policy") == "oracle" else 1)), default=0)   # oracle: bytes held
    return {"budget_bytes": budget, "jobs": len(jobs), "capped": cap > 0 and len(jobs) == cap and
            sum(p for _, p in jobs) <= budget, "max_concurrent": adm.max_running,
            "expected_peak_bytes": adm.peak_held_bytes, "order": [n for n, _ in jobs],
            "measured_peak_bytes": physical, "wall_s": r["wall_s"],
            "spilled_to_cos": int(state.counters.get("spilled_to_cos", 0)) - spilled,
            "leaked_bytes": [d["memory"]["leaked_bytes"] for d in reps]}


def _baseline(spec: str) -> bool:
    return spec.split(":")[0] in ("pocket", "jiffy")


def _budget_sweep(on: Any, both: dict[str, dict[str, Any]], specs: dict[str, str],
                  concurrently: Any) -> dict[str, Any]:
    """FuncStore Fig. 11a: every workflow at once with the stack's total memory budget (the
    metadata server's ``memory_budget``; beyond it objects go to COS) at 20%, 60% and 100%
    of the workload's peak (what the unbudgeted concurrent run allocated under pocket, which
    frees nothing early), the same bytes for every policy in ``specs``: completion time of
    the set, COS PUTs and the jobs' physical peaks, against each policy's unbudgeted run."""
    from sdk.local import _study

    def peak_of(reps: list[dict[str, Any]]) -> int:
        return max((v for _, v in _study.summed_series([d["memory"]["series"] for d in reps])), default=0)

    peak = peak_of(both["pocket"]["reports"])
    out: dict[str, Any] = {"peak_bytes": peak, "peak_of": "pocket"}
    for pol, spec in specs.items():
        state = on(spec).handler.state
        saved = state.memory_budget
        row: dict[str, Any] = {"unbudgeted_s": both[pol]["wall_s"]}
        try:
            for pct in (20, 60, 100):
                state.memory_budget = peak * pct // 100
                r = concurrently(spec)
                row[f"{pct}%"] = {"budget_bytes": peak * pct // 100, "wall_s": r["wall_s"],
                                  "cos_puts": r["store"]["cos_puts"], "peak_bytes": peak_of(r["reports"]),
                                  "leaked_bytes": [d["memory"]["leaked_bytes"] for d in r["reports"]]}
        finally:
            state.memory_budget = saved
        out[pol] = row
    return out


def _figures(wfs: dict[str, Path], policies: dict[str, str], alone: dict[str, dict[str, dict[str, Any]]],
             both: dict[str, dict[str, Any]], leases: list[int], took: float, block_size: int,
             repeat: int) -> dict[str, Any]:
    from sdk.local import _study

    per_wf = {pol: {n: alone[pol][n]["memory"]["mb_s"] for n in wfs} for pol in policies}
    measured = {pol: round(sum(v.values()), 6) for pol, v in per_wf.items()}   # oracle: the live run's

    def units(names: list[str]) -> dict[str, dict[str, Any]]:
        return _study.in_units({pol: [alone[pol][n] for n in names] for pol in ("funcstore", "pocket", "jiffy")})

    in_units = units(list(wfs))
    mb_s = in_units["grain"]["mb_s"]                  # the headline: every policy by the grain, the trace oracle
    grain_wf = {pol: {n: units([n])["grain"]["mb_s"][pol] for n in wfs} for pol in policies}
    rest = [n for n in wfs if n != "video"]
    live = {pol: round(sum(alone[pol][n]["memory"]["live_mb_s"] for n in wfs), 6) for pol in policies}
    peaks = {pol: [alone[pol][n]["memory"]["peak_bytes"] for n in wfs] for pol in policies}
    cost: dict[str, Any] = {}
    for pol in policies:
        st = [alone[pol][n]["store"] for n in wfs]
        cost[pol] = _study.storage_cost(measured[pol], sum(s["invocations"] for s in st),
                                        sum(s["cos_puts"] for s in st), sum(s["cos_gets"] for s in st))
    f_cost = cost["funcstore"]["total_usd"]
    result: dict[str, Any] = {
        "workflows": list(wfs), "policies": policies, "jiffy_lease_ms": int(policies["jiffy"].split(":")[1]),
        "jiffy_leases_tried_ms": leases, "block_size": block_size, "repeat": repeat,
        "mb_s": mb_s, **{k: in_units["grain"][k] for k in ("reduction_vs_pocket", "reduction_vs_jiffy",
                                                              "over_oracle")},
        "units": in_units, "live_mb_s": live, "live_oracle_mb_s": measured["oracle"],
        "over_live_oracle": _study.reductions({"funcstore": mb_s["funcstore"],
                                               "oracle": measured["oracle"]})["over_oracle"],
        "shares": _study.shares(grain_wf),
        "without_video": ({u: {k: v for k, v in col.items() if k != "charged_as"} for u, col in units(rest).items()}
                          if rest and len(rest) < len(wfs) else None),
        "pocket_alloc_mb_s": round(sum(alone["pocket"][n]["memory"].get("alloc_mb_s", 0.0) for n in wfs), 6),
        "charged_as": {"funcstore": "grains held (physical), released once the last declared reader has the "
                                    "bytes (the object, in the buffer or COS, freed at the last reader's commit); "
                                    "slices and chunks of every lifetime pool packed into shared blocks",
                       "pocket": "one object per block, nothing freed before the end; the job's physical peak "
                                 "reserved from the run's start to its end (peak x wall time)",
                       "jiffy": "one object per block, allocated at write, freed after the lease with no access "
                                "(blocks held, physical)",
                       "oracle": "the trace oracle: every object's bytes from the end of its write to its last "
                                 "read in funcstore's own runs, no rounding (the live oracle run's bytes held: "
                                 "live_oracle_mb_s)"},
        "per_workflow": {n: {pol: {"mb_s": per_wf[pol][n], "mb_s_runs": alone[pol][n]["mb_s_runs"],
                                   "peak_bytes": alone[pol][n]["memory"]["peak_bytes"],
                                   "wall_s": alone[pol][n]["wall_s"],
                                   "block_mb_s": alone[pol][n]["memory"].get("block_mb_s"),
                                   "peak_block_bytes": alone[pol][n]["memory"].get("peak_block_bytes"),
                                   "trace_oracle_mb_s": alone[pol][n]["memory"].get("trace_oracle_mb_s"),
                                   "leaked_bytes": alone[pol][n]["memory"]["leaked_bytes"]} for pol in policies}
                         | {"reductions": {u: {k: v for k, v in col.items() if k not in ("charged_as", "mb_s")}
                                           for u, col in units([n]).items()}}
                         for n in wfs},
        "decomposition": {"all": _study.decompose_trace([alone["funcstore"][n] for n in wfs]),
                          **{n: _study.decompose_trace([alone["funcstore"][n]]) for n in wfs}},
        "decomposition_live_oracle": {
            "all": _study.decompose([alone["funcstore"][n] for n in wfs], [alone["oracle"][n] for n in wfs]),
            **{n: _study.decompose([alone["funcstore"][n]], [alone["oracle"][n]]) for n in wfs}},
        "max_jobs_200mb": {pol: _study.max_jobs(peaks[pol], 200 * MB) for pol in policies},
        "max_jobs_400mb": {pol: _study.max_jobs(peaks[pol], 400 * MB) for pol in policies},
        "storage_cost": cost,
        "cost_vs_pocket": round(f_cost / cost["pocket"]["total_usd"], 4) if cost["pocket"]["total_usd"] else None,
        "study_s": round(took, 1),
    }
    if both:
        cmb = {pol: round(sum(d["memory"]["mb_s"] for d in both[pol]["reports"]), 6) for pol in policies}
        live_o = cmb["oracle"]
        cmb["oracle"] = round(_study.trace_oracle_mb_s(both["funcstore"]["reports"]), 6)   # the trace oracle
        result["concurrent"] = {
            "mb_s": cmb, **_study.reductions(cmb), "live_oracle_mb_s": live_o,
            "over_live_oracle": _study.reductions({"funcstore": cmb["funcstore"], "oracle": live_o})["over_oracle"],
            "wall_s": {pol: both[pol]["wall_s"] for pol in policies},
            "jiffy": both["jiffy"]["spec"],
            "peak_bytes": {pol: max((v for _, v in _study.summed_series(
                [d["memory"]["series"] for d in both[pol]["reports"]], 2 if pol == "oracle" else 1)), default=0)
                for pol in policies},
            "leaked_bytes": {pol: [d["memory"]["leaked_bytes"] for d in both[pol]["reports"]] for pol in policies}}
    return result


def _plot(png: Path, wfs: dict[str, Path], policies: dict[str, str], alone: dict[str, dict[str, dict[str, Any]]],
          both: dict[str, dict[str, Any]]) -> bool:
    """One panel per workflow alone (and the concurrent case), one step line per policy:
    allocated MB over seconds since the run's first write (oracle: bytes held). False
    without matplotlib (the ``plot`` extra)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    from sdk.local import _study

    panels = [(n, {pol: [alone[pol][n]["memory"]["series"]] for pol in policies}) for n in wfs]
    if both:
        panels.append(("all concurrently", {pol: [d["memory"]["series"] for d in both[pol]["reports"]]
                                           for pol in policies}))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (title, by_pol) in zip(axes[0], panels):
        for pol, spec in policies.items():
            s = _study.summed_series(by_pol[pol], 2 if pol == "oracle" else 1)
            if not s:
                continue
            xs = [t - s[0][0] for t, _ in s] + [max(t for t, _ in s) - s[0][0]]
            ys = [v / MB for _, v in s] + [0.0]
            ax.step(xs, ys, where="post", label=spec)
        ax.set_title(title)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("allocated memory (MB)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return True


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:.1f}%"


def _print_table(r: dict[str, Any]) -> None:
    print(f"policy      {'  '.join(f'{n:>11}' for n in r['workflows'])}     total MB-s   cost USD")
    for pol, spec in r["policies"].items():
        row = "  ".join(f"{r['per_workflow'][n][pol]['mb_s']:>11.3f}" for n in r["workflows"])
        total = sum(r['per_workflow'][n][pol]['mb_s'] for n in r['workflows'])   # as measured (oracle: the live run)
        print(f"{spec:<11} {row}  {total:>13.3f}   {r['storage_cost'][pol]['total_usd']:.3g}")
    print(f"{'unit':<18} {'funcstore':>10} {'pocket':>10} {'jiffy':>10} {'oracle':>10}  "
          f"{'vs pocket':>9} {'vs jiffy':>9} {'over oracle':>11}")
    for unit, col in r["units"].items():
        m = col["mb_s"]
        print(f"{unit:<18} {m['funcstore']:>10.3f} {m['pocket']:>10.3f} {m['jiffy']:>10.3f} {m['oracle']:>10.3f}  "
              f"{_pct(col['reduction_vs_pocket']):>9} {_pct(col['reduction_vs_jiffy']):>9} {_pct(col['over_oracle']):>11}")
    print(f"funcstore (grain unit, trace oracle): {_pct(r['reduction_vs_pocket'])} below pocket, "
          f"{_pct(r['reduction_vs_jiffy'])} below jiffy, {_pct(r['over_oracle'])} over the oracle "
          f"({_pct(r['over_live_oracle'])} over the live oracle run); cost {_pct(r['cost_vs_pocket'])} of pocket's")
    if r.get("without_video"):
        g = r["without_video"]["grain"]
        print(f"without video (grain unit): {_pct(g['reduction_vs_pocket'])} below pocket, "
              f"{_pct(g['reduction_vs_jiffy'])} below jiffy, {_pct(g['over_oracle'])} over the oracle")
    print("funcstore's MB-s by workflow: " + ", ".join(f"{n} {_pct(v)}" for n, v in r["shares"]["funcstore"].items()))
    dec = r["decomposition"]["all"]
    print(f"over the oracle = grains held / bytes held {dec['blocks']} x bytes held / the trace oracle's "
          f"{dec['held']} - 1")
    if "concurrent" in r:
        c = r["concurrent"]
        print(f"all concurrently: {_pct(c['reduction_vs_pocket'])} below pocket, "
              f"{_pct(c['reduction_vs_jiffy'])} below jiffy, {_pct(c['over_oracle'])} over the trace oracle "
              f"({_pct(c['over_live_oracle'])} over the live oracle run)")
    if "budget_completion" in r:
        b = r["budget_completion"]
        for pol, row in b.items():
            if isinstance(row, dict):
                print(f"all concurrently under {pol} with a budget of {b['peak_of']}'s peak: " + ", ".join(
                    f"{k} {v['wall_s']:.2f} s" for k, v in row.items() if k.endswith("%"))
                    + f" (none {row['unbudgeted_s']:.2f} s)")
    for mb in (200, 400):
        how = "live admission controller" if "admission" in r else "computed from the peaks"
        print(f"max jobs within {mb} MB ({how}): " + ", ".join(f"{p} {n}" for p, n in r[f"max_jobs_{mb}mb"].items()))
