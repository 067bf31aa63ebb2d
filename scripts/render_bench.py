#!/usr/bin/env python3
"""Benchmark tables for the documentation site, rendered from the benchmarks' own JSON.

    python scripts/render_bench.py store          # the Markdown the store page shows

reads docs/bench/<name>.json (written by scripts/bench_json.py: the JSON object that
`funcsion bench <name> --json` printed, the exact command, the date, the commit and the load
average) and renders: where the figures come from, a table of the benchmark's headline
figures (each beside its target where the project set one, and whether this run met it), and
every figure of the run in a collapsed table. The documentation build calls `render()` for
each `<!-- funcsion:bench NAME -->` marker (scripts/docs_hooks.py), so no number on a
benchmark page is typed by hand.

What this does not do: it runs no benchmark and keeps no history; a page shows the latest
checked-in run of each benchmark only.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Headline", "HEADLINES", "MATRICES", "flatten", "render"]

BENCH_DIR = Path(__file__).resolve().parent.parent / "docs" / "bench"


@dataclass(frozen=True, slots=True)
class Headline:
    """One figure a page leads with: a dotted key into the result, what it is, a unit, and the
    project's target for it (``op`` ``<=`` or ``>=`` against ``target``), if it has one."""

    key: str
    label: str
    unit: str = ""
    op: str = ""
    target: float | None = None


_KIB, _MIB = "4096", "1048576"
_100MIB = "104857600"

HEADLINES: dict[str, list[Headline]] = {
    "hdag": [
        Headline("functions", "functions in the synthetic workflow"),
        Headline("objects", "objects"),
        Headline("parse_ms", "parse and validate the WDS", "ms"),
        Headline("build_ms", "build the HDAG", "ms"),
        Headline("features_ms", "lifetime features of every object", "ms"),
    ],
    "metadata": [
        Headline("one_client_rps", "1 client, `get`", "ops/s"),
        Headline("thrift_baseline_rps", "peer: bare Thrift server, trivial handler, 1 client", "ops/s"),
        Headline("one_client_vs_thrift", "1 client against the bare Thrift server", "x", ">=", 0.5),
        Headline("journaled_one_client_rps", "1 client, every `get` a journaled read", "ops/s"),
        Headline("batched_ops_per_s", "`get_batch` x1000, repeat reads", "ops/s", ">=", 100_000),
        Headline("batched_journaled_ops_per_s", "`get_batch` x1000, first (journaled) reads", "ops/s"),
        Headline("batched_read_ops_per_s", "`read_batch` (what `get_many` calls)", "ops/s"),
        Headline("record_read_us", "the pure core: record one read", "µs"),
        Headline("commit10_us", "the pure core: a 10-record commit", "µs"),
        Headline("bytes_per_object", "server memory per live object", "bytes"),
    ],
    "run": [
        Headline("cold_start_ms", "cold start of a task worker, p50 (forked)", "ms"),
        Headline("import_sdk_ms", "peer: a fresh `python -c \"import sdk\"`", "ms"),
        Headline("cold_vs_import", "cold start against `import sdk`", "x", "<=", 0.5),
        Headline("warm_overhead_ms", "overhead per warm invocation, p50 (4x16 no-op tasks)", "ms", "<=", 5),
        Headline("shuffle_per_object_ms", "64x64 shuffle of 4 KiB objects, per object (PUT + GET)", "ms"),
        Headline("redis_set_get_ms", "peer: Redis SET + GET of 4 KiB", "ms"),
        Headline("shuffle_vs_redis", "shuffle against Redis", "x", "<=", 5),
        Headline("uploads_skipped_share", "shuffle: uploads skipped (freed before due)", ""),
        Headline("coded_shuffle_per_object_ms", "8x8 shuffle of coded 2 MiB objects, per object", "ms"),
        Headline("coded_uploads_skipped_share", "coded shuffle: uploads skipped", ""),
    ],
    "store": [
        Headline(f"sizes.{_KIB}.put_p50_us", "4 KiB PUT p50", "µs"),
        Headline(f"sizes.{_KIB}.redis_put_p50_us", "peer: Redis SET of 4 KiB, p50", "µs"),
        Headline(f"sizes.{_KIB}.put_vs_redis", "4 KiB PUT against Redis SET (p50)", "x", "<=", 3),
        Headline(f"sizes.{_KIB}.get_p50_us", "4 KiB GET p50", "µs"),
        Headline(f"sizes.{_KIB}.redis_get_p50_us", "peer: Redis GET of 4 KiB, p50", "µs"),
        Headline(f"sizes.{_KIB}.get_vs_redis", "4 KiB GET against Redis GET (p50)", "x", "<=", 2),
        Headline(f"sizes.{_MIB}.put_p50_us", "1 MiB PUT p50", "µs"),
        Headline(f"sizes.{_MIB}.get_p50_us", "1 MiB GET p50", "µs"),
        Headline(f"sizes.{_MIB}.get_vs_redis", "1 MiB GET against Redis GET (p50)", "x", "<=", 2.5),
        Headline(f"sizes.{_100MIB}.put_mbps", "100 MiB PUT", "MB/s"),
        Headline(f"sizes.{_100MIB}.get_into_mbps", "100 MiB `get_into` (into a reused buffer)", "MB/s"),
        Headline(f"sizes.{_100MIB}.get_mbps", "100 MiB `get` (a fresh `bytes`)", "MB/s"),
        Headline(f"sizes.{_100MIB}.raw_mbps", "peer: raw loopback socket copy of 100 MiB", "MB/s"),
        Headline(f"sizes.{_100MIB}.put_vs_raw", "100 MiB PUT against the raw socket", "x", ">=", 0.25),
        Headline(f"sizes.{_100MIB}.get_into_vs_raw", "100 MiB `get_into` against the raw socket", "x", ">=", 0.5),
        Headline(f"sizes.{_100MIB}.get_vs_raw", "100 MiB `get` against the raw socket", "x", ">=", 0.5),
    ],
    "utilization": [
        Headline("units.grain.mb_s.funcstore", "funcstore, by the 4 KiB grain", "MB-s"),
        Headline("units.grain.mb_s.pocket", "pocket, by the grain, peak reserved for the run", "MB-s"),
        Headline("units.grain.mb_s.jiffy", "jiffy, by the grain", "MB-s"),
        Headline("units.grain.mb_s.oracle", "trace oracle of funcstore's own runs", "MB-s"),
        Headline("reduction_vs_pocket", "funcstore: MB-s saved against pocket (grain unit)", "", ">=", 0.90),
        Headline("reduction_vs_jiffy", "funcstore: MB-s saved against jiffy (grain unit)", "", ">=", 0.85),
        Headline("over_oracle", "funcstore: MB-s over the trace oracle (grain unit)", "", "<=", 0.05),
        Headline("units.block.reduction_vs_pocket", "by whole blocks: saved against pocket", ""),
        Headline("units.block.reduction_vs_jiffy", "by whole blocks: saved against jiffy", ""),
        Headline("units.block.over_oracle", "by whole blocks: over the trace oracle", ""),
        Headline("units.paper_block_model.reduction_vs_pocket",
                 "paper's block model (pocket, jiffy by the block): saved against pocket", ""),
        Headline("units.paper_block_model.reduction_vs_jiffy", "paper's block model: saved against jiffy", ""),
        Headline("without_video.grain.reduction_vs_pocket", "without video, grain: saved against pocket", ""),
        Headline("without_video.grain.reduction_vs_jiffy", "without video, grain: saved against jiffy", ""),
        Headline("shares.funcstore.video", "video's share of funcstore's MB-s", ""),
        Headline("over_live_oracle", "funcstore over the live oracle run (a separate run: no bound)", ""),
        Headline("decomposition.all.blocks", "grains held per byte held (funcstore)", "x"),
        Headline("decomposition.all.held", "bytes held against the trace oracle's", "x"),
        Headline("max_jobs_200mb.funcstore", "jobs at once within 200 MB, funcstore"),
        Headline("max_jobs_200mb.pocket", "jobs at once within 200 MB, pocket"),
        Headline("max_jobs_400mb.funcstore", "jobs at once within 400 MB, funcstore"),
        Headline("max_jobs_400mb.pocket", "jobs at once within 400 MB, pocket"),
        Headline("cost_vs_pocket", "storage cost against pocket's", "x"),
        Headline("oracle_reruns", "oracle runs repeated (a reader lost its input)"),
    ],
    "recovery": [
        Headline("cos.local.recover_1gib_s", "local COS: recover 1 GiB alone", "s"),
        Headline("cos.local.recover_1gib_parallel_s", "local COS: recover 1 GiB by the best recovery group", "s"),
        Headline("cos.local.group_size", "local COS: the best group's size"),
        Headline("cos.local.speedup", "local COS: speed-up of the best group", "x", ">=", 3),
        Headline("cos.local.errors", "local COS: GET errors while instances are killed", "", "<=", 0),
        Headline("cos.local.p99_before_us", "local COS: GET p99 before kills", "µs"),
        Headline("cos.local.p99_during_us", "local COS: GET p99 while an instance is killed every 2 s", "µs"),
        Headline("cos.s3.recover_1gib_s", "S3 (moto): recover 1 GiB alone", "s"),
        Headline("cos.s3.recover_1gib_parallel_s", "S3 (moto): recover 1 GiB by the best recovery group", "s"),
        Headline("cos.s3.group_size", "S3 (moto): the best group's size"),
        Headline("cos.s3.speedup", "S3 (moto): speed-up of the best group", "x", ">=", 3),
        Headline("cos.s3.errors", "S3 (moto): GET errors while instances are killed", "", "<=", 0),
        Headline("cos.s3.p99_before_us", "S3 (moto): GET p99 before kills", "µs"),
        Headline("cos.s3.p99_during_us", "S3 (moto): GET p99 while an instance is killed every 2 s", "µs"),
    ],
    "elasticity": [
        Headline("hit_ratio", "memory-level read hit ratio (function memory and cache functions)", "", ">=", 0.95),
        Headline("buffer_hit_ratio", "reads the daemon's persistent buffer answered (not hits)", ""),
        Headline("cos_read_ratio", "reads from COS", ""),
        Headline("functions_peak", "functions holding data, peak"),
        Headline("functions_mean", "functions holding data, mean"),
        Headline("cos_requests_per_object", "COS requests per object, the daemon's"),
        Headline("cos_requests_functions_per_object", "COS requests per object, the storage functions' own"),
        Headline("cost_usd_per_hour", "funcsion, storage only", "$/h"),
        Headline("static_cost_usd_per_hour", "peer: static warm pool", "$/h"),
        Headline("always_on_cost_usd_per_hour", "peer: always-on memory", "$/h"),
        Headline("burst_get_p99_us", "burst GET p99 with cache functions", "µs"),
        Headline("burst_get_p99_us_no_cache", "burst GET p99 without", "µs"),
    ],
    "lifetime": [
        Headline("per_category.analytics.accuracy", "accuracy, analytics (word count)"),
        Headline("per_category.compile.accuracy", "accuracy, compile (gg compile)"),
        Headline("per_category.video.accuracy", "accuracy, video"),
        Headline("per_category.analytics.mae_ms", "MAE, analytics", "ms"),
        Headline("per_category.compile.mae_ms", "MAE, compile", "ms"),
        Headline("per_category.video.mae_ms", "MAE, video", "ms"),
        Headline("per_category.video.heuristic_accuracy", "the heuristic's accuracy, video", ""),
        Headline("per_category.video.funcstore_feature_ceiling", "FuncStore's five features at best, video", ""),
        Headline("predict_us", "one prediction (numpy)", "µs"),
        Headline("frag_mb_s_by_config.model", "fragmentation, grouped by the model", "MB-s"),
        Headline("frag_mb_s_by_config.nogroup", "fragmentation, not grouped", "MB-s"),
        Headline("model_vs_nogroup", "grouped by the model against not grouped", "x"),
    ],
    "scale": [
        Headline("daemons.4.modelled.get_mib_s", "4 daemons, modelled: 100 MiB GET", "MiB/s"),
        Headline("efficiency_4_daemons", "4 daemons against 4 x 1, modelled", "", ">=", 0.9),
        Headline("efficiency_4_shards", "4 shards against 4 x 1, modelled", "", ">=", 0.9),
        Headline("physical_2_daemons_get_ratio", "2 daemon processes against 1 on this host", "x", ">=", 1.3),
    ],
    "offload": [
        Headline("sizes.4096.offload_boundary_p50_us", "4 KiB offloaded: writer + reader at the handler boundary, p50", "µs"),
        Headline("sizes.4096.peer_boundary_p50_us", "peer: 4 KiB inline, writer + reader, p50", "µs"),
        Headline("sizes.4096.offload_e2e_p50_ms", "4 KiB offloaded: writer + reader Lambdas end to end, p50", "ms"),
        Headline("sizes.4096.peer_e2e_p50_ms", "peer: 4 KiB inline, Lambdas end to end, p50", "ms"),
        Headline("sizes.204800.e2e_ratio", "200 KiB end to end: offloaded over inline (p50)", "x"),
        Headline("sizes.1048576.offload_e2e_p50_ms", "1 MiB offloaded: Lambdas end to end, p50", "ms"),
        Headline("sizes.1048576.peer_e2e_p50_ms", "peer: 1 MiB S3 claim check (moto server), end to end, p50", "ms"),
        Headline("sizes.1048576.e2e_ratio", "1 MiB end to end: offloaded over the S3 claim check (p50)", "x"),
        Headline("sizes.20971520.e2e_ratio", "20 MiB end to end: offloaded over the S3 claim check (p50)", "x"),
        Headline("sizes.20971520.boundary_ratio", "20 MiB at the handler boundary: over the S3 claim check", "x"),
    ],
}


#: Benchmarks whose result holds one object per case (a size, a level): (title, where the
#: cases are, how to name a case, the columns as (key in a case, label)).
MATRICES: dict[str, list[tuple[str, str, str, list[tuple[str, str]]]]] = {
    "offload": [("Per payload, writer + reader state (p50; the peer is inline under 256 KiB, an S3 claim check over)",
                 "sizes", "bytes", [
        ("peer", "peer"), ("offload_boundary_p50_us", "offload boundary µs"),
        ("peer_boundary_p50_us", "peer boundary µs"), ("boundary_ratio", "boundary x"),
        ("offload_e2e_p50_ms", "offload e2e ms"), ("offload_e2e_p99_ms", "offload e2e p99 ms"),
        ("peer_e2e_p50_ms", "peer e2e ms"), ("peer_e2e_p99_ms", "peer e2e p99 ms"), ("e2e_ratio", "e2e x")])],
    "store": [("Per object size (p50 in µs, throughput in MB/s)", "sizes", "bytes", [
        ("put_p50_us", "PUT p50"), ("redis_put_p50_us", "Redis SET p50"), ("s3_put_p50_us", "S3 PUT p50"),
        ("get_p50_us", "GET p50"), ("redis_get_p50_us", "Redis GET p50"), ("s3_get_p50_us", "S3 GET p50"),
        ("put_mbps", "PUT MB/s"), ("get_mbps", "GET MB/s"), ("get_into_mbps", "`get_into` MB/s"),
        ("raw_mbps", "raw socket MB/s")])],
    "utilization": [("MB-s per workflow, each alone", "per_workflow", "workflow", [
        ("funcstore.mb_s", "funcstore"), ("pocket.mb_s", "pocket"), ("jiffy.mb_s", "jiffy"),
        ("oracle.mb_s", "oracle")])],
    "metadata": [("Single-op RPCs by client processes", "levels", "clients", [
        ("ops_per_s", "ops/s"), ("p50_us", "p50 µs"), ("p99_us", "p99 µs"), ("mean_us", "mean µs")])],
    "scale": [("Daemon processes (100 MiB in MiB/s, 4 KiB in ops/s; modelled: one VM per daemon)", "daemons",
               "daemons", [
                   ("physical.get_mib_s", "GET"), ("physical.put_mib_s", "PUT"),
                   ("physical.get_4k_ops_s", "4 KiB GET"), ("physical.put_4k_ops_s", "4 KiB PUT"),
                   ("modelled.get_mib_s", "modelled GET"), ("modelled.put_mib_s", "modelled PUT"),
                   ("modelled.get_4k_ops_s", "modelled 4 KiB GET"), ("modelled.put_4k_ops_s", "modelled 4 KiB PUT"),
                   ("physical.client_cpu_cores.get_large", "GET: clients' cores"),
                   ("physical.daemon_cpu_cores.get_large", "GET: daemons' cores")]),
              ("Metadata shards (`get` calls/s; modelled: one VM per shard)", "shards", "shards", [
                  ("physical.ops_s", "calls/s"), ("modelled.ops_s", "modelled calls/s"),
                  ("physical.clients", "client processes"), ("physical.client_cpu_cores", "clients' cores"),
                  ("physical.server_cpu_cores", "shards' cores")])],
    "recovery": [("Recovery time by group size, s", "cos", "COS", [
        ("recover_1gib_s", "alone"), ("parallel_s.4", "group of 4"), ("parallel_s.8", "group of 8"),
        ("parallel_s.16", "group of 16")])],
}


def _case_name(kind: str, name: str) -> str:
    if kind == "bytes" and name.isdigit():
        n = int(name)
        for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
            if n >= size and n % size == 0:
                return f"{n // size} {unit}"
        return f"{n} B"
    return name


def _matrix(result: dict[str, Any], title: str, where: str, kind: str, columns: list[tuple[str, str]]) -> list[str]:
    cases = result.get(where)
    if isinstance(cases, list):  # a list of objects each naming its case by the key `kind`
        cases = {str(c.get(kind, i)): c for i, c in enumerate(cases) if isinstance(c, dict)}
    if not isinstance(cases, dict) or not cases:
        return []
    flat = {name: flatten(case) for name, case in cases.items() if isinstance(case, dict)}
    present = [(k, label) for k, label in columns if any(k in f for f in flat.values())]
    header = "size" if kind == "bytes" else kind
    lines = [f"**{title}**", "", f"| {header} | " + " | ".join(label for _, label in present) + " |",
             "|---" * (len(present) + 1) + "|"]
    for name, f in flat.items():
        lines.append(f"| {_case_name(kind, name)} | " + " | ".join(_fmt(f.get(k)) for k, _ in present) + " |")
    return [*lines, ""]


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys to scalars (lists of scalars stay lists; lists of objects are indexed)."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}.{i}" if prefix else str(i)))
    else:
        out[prefix] = value
    return out


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(_fmt(v) for v in value)
    return " ".join(str(value).split()).replace("|", "\\|")


def _verdict(h: Headline, value: Any) -> str:
    if h.target is None:
        return ""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "not measured"
    met = value <= h.target if h.op == "<=" else value >= h.target
    return "met" if met else "**not met**"


def _source(name: str, record: dict[str, Any]) -> str:
    before, after = record.get("load_before") or [], record.get("load_after") or []
    load = ""
    if before and after:
        load = (f", load average {before[0]:.2f} / {before[1]:.2f} / {before[2]:.2f} (1 / 5 / 15 min) before "
                f"and {after[0]:.2f} / {after[1]:.2f} / {after[2]:.2f} after")
    return (f"Measured with `{record['command']}` on {record['started_utc']} at commit `{record['commit']}`, "
            f"{record.get('seconds', '?')} s, on a machine of {record.get('cpus', '?')} cores shared with other "
            f"work{load}: a loaded machine, so the figures are lower bounds and move between runs. "
            f"Source: `docs/bench/{name}.json`; to measure again, "
            f"`python scripts/bench_json.py {' '.join(record['command'].split()[2:-1])}`.")


def render(name: str, bench_dir: Path = BENCH_DIR) -> str:
    """The Markdown for benchmark ``name`` from ``bench_dir/<name>.json``."""
    path = bench_dir / f"{name}.json"
    if not path.is_file():
        return (f'!!! warning "Not measured yet"\n    No `docs/bench/{name}.json` is checked in: run '
                f"`python scripts/bench_json.py {name}` to make it.\n")
    record = json.loads(path.read_text())
    flat = flatten(record["result"])
    lines = [_source(name, record), ""]
    heads = HEADLINES.get(name, [])
    if heads:
        lines += ["| what | this run | target | |", "|---|---|---|---|"]
        for h in heads:
            if h.key not in flat:  # the benchmark no longer reports it, or this run skipped it
                lines.append(f"| {h.label} | not in this run's JSON (`{h.key}`) | | |")
                continue
            value = flat[h.key]
            unit = "" if not h.unit or value is None else h.unit if h.unit == "x" else f" {h.unit}"
            target = f"{h.op.replace('<=', '≤').replace('>=', '≥')} {_fmt(h.target)}" if h.target is not None else ""
            lines.append(f"| {h.label} | {_fmt(value)}{unit} | {target} | {_verdict(h, value)} |")
        lines.append("")
    for title, where, kind, columns in MATRICES.get(name, []):
        lines += _matrix(record["result"], title, where, kind, columns)
    lines += [f'??? note "Every figure of this run ({len(flat)})"', "", "    | key | value |", "    |---|---|"]
    lines += [f"    | `{k}` | {_fmt(v)} |" for k, v in flat.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: scripts/render_bench.py NAME (renders docs/bench/NAME.json)", file=sys.stderr)
        sys.exit(2)
    sys.stdout.write(render(sys.argv[1]))
