"""``funcsion bench metadata``: throughput and latency of the metadata server.

Starts a real server process (with its journal), measures single-op RPCs with
1, 4 and 16 client processes, one client whose every read is journaled, and
batched gets, next to a bare Thrift server with a trivial handler driven by
the same 1-client loop in the same run; then the pure core's cost to record a
read and commit a 10-record buffer, and metadata bytes per live object.
``--json`` prints one JSON object as the last line (keys single_op_rps,
one_client_rps, journaled_one_client_rps, thrift_baseline_rps,
one_client_vs_thrift, journaled_vs_thrift, batched_ops_per_s,
batched_journaled_ops_per_s, batched_read_ops_per_s, p50_us, p99_us, record_read_us, commit10_us,
bytes_per_object). The logic lives in ``metadata_server._bench``.
"""

from __future__ import annotations

import argparse
import json

from funcsion_rpc.errors import InvalidRequest

__all__ = ["HELP", "add_arguments", "run"]

HELP = "benchmark the metadata server: RPC throughput/latency, batched ops, core costs, bytes per object"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--seconds", type=float, default=2.0, help="duration of each RPC level (default 2)")
    p.add_argument("--batch", type=int, default=1000, help="objects per batched RPC (default 1000)")
    p.add_argument("--clients", default="1,4,16", help="client process counts (default 1,4,16)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of 1 client alternating with the bare Thrift server (default 3)")
    p.add_argument("--no-journal", action="store_true", help="run the server without its journal")
    p.add_argument("--objects", type=int, default=20_000,
                   help="objects for the in-process measurements (default 20000)")
    p.add_argument("--skip-rpc", action="store_true", help="only the in-process measurements")


def run(args: argparse.Namespace) -> int:
    from metadata_server._bench import bytes_per_object, core_costs, rpc_bench

    try:
        levels = tuple(int(x) for x in args.clients.split(","))
    except ValueError:
        raise InvalidRequest(f"--clients wants numbers like 1,4,16, got {args.clients!r}") from None
    if args.seconds <= 0 or args.batch <= 0 or not levels or min(levels) <= 0 or args.objects < 10 \
            or not 1 <= args.rounds <= 16:
        raise InvalidRequest("--seconds, --batch and --clients must be positive, --rounds 1 to 16, --objects at "
                             "least 10")
    result: dict[str, object] = {}
    result.update({k: round(v, 3) for k, v in core_costs(args.objects, max(args.objects // 10, 1)).items()})
    result["bytes_per_object"] = round(bytes_per_object(args.objects), 1)
    if not args.skip_rpc:
        rpc = rpc_bench(args.seconds, args.batch, levels, journal=not args.no_journal, rounds=args.rounds)
        print("clients  ops/s     p50_us   p99_us")
        for lv in rpc["single"]:
            print(f"{lv['clients']:>7}  {lv['ops_per_s']:>8.0f}  {lv['p50_us']:>7.1f}  {lv['p99_us']:>7.1f}")
        print(f"1 client, {len(rpc['rounds'])} rounds alternating with a bare Thrift server (medians):")
        for name, key in (("bare Thrift server", "thrift_baseline"), ("metadata server", "one_client"),
                          ("every read journaled", "journaled_one_client")):
            print(f"  {name:<21} {rpc[key + '_rps']:>8.0f} ops/s  p50 {rpc[key + '_p50_us']:>6.1f} us")
        print(f"  ratio to the bare server: {rpc['one_client_vs_thrift']:.2f} (every read journaled: "
              f"{rpc['journaled_vs_thrift']:.2f})")
        b, bj = rpc["batched"], rpc["batched_journaled"]
        print(f"batched get_batch x{rpc['batch']} (4 clients): {b['ops_per_s']:.0f} ops/s, "
              f"p50 {b['p50_us']:.0f} us per RPC; first reads (journaled): {bj['ops_per_s']:.0f} ops/s; "
              f"read_batch (get_many's call): {rpc['batched_read_ops_per_s']:.0f} ops/s")
        result.update({k: round(rpc[k], 1) for k in (
            "single_op_rps", "one_client_rps", "one_client_p50_us", "journaled_one_client_rps",
            "journaled_one_client_p50_us", "thrift_baseline_rps", "thrift_baseline_p50_us", "batched_ops_per_s",
            "batched_journaled_ops_per_s", "batched_read_ops_per_s", "p50_us", "p99_us")})
        result.update({k: round(rpc[k], 3) for k in ("one_client_vs_thrift", "journaled_vs_thrift")})
        result["journal"] = rpc["journal"]
        result["levels"] = [{k: round(v, 1) for k, v in lv.items()} for lv in rpc["single"]]
    print(f"core: record a read {result['record_read_us']} us, commit 10 records {result['commit10_us']} us; "
          f"{result['bytes_per_object']} metadata bytes per live object")
    if args.json:
        print(json.dumps(result))
    return 0
