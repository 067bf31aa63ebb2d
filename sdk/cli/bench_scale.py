"""``funcsion bench scale``: what N daemons and M metadata shards carry together
(issue 31's "Numbers").

Data path (``_bench_scale_data``): N standalone daemon processes (each places chunks on
its own group of storage functions), load-generator processes routing each key to its
daemon by the rendezvous hash (``funcsion_rpc.routing``): aggregate 100 MiB PUT and GET
MiB/s and 4 KiB PUT and GET operations per second with 1, 2 and 4 daemons. Metadata path
(``_bench_scale_meta``): M ``serve metadata --shard I/M`` processes, clients routing by
run id: aggregate ``get`` calls per second with 1, 2 and 4 shards.

Each configuration is measured twice in the same run, with the same objects:

- ``physical``: on this host as it is. Every process shares its cores (2 here), so
  this is CPU-bound; ``per_core_efficiency`` is throughput at N over throughput at 1
  times min(N, cores).
- ``modelled``: each daemon process holds its traffic to a modelled NIC of
  ``--host-bandwidth-mbps`` MB/s each way, a token bucket (``storage_functions.throttle
  .HostLink``, the per-function bandwidth model's clock) that every GET and PUT waits
  for by its coded bytes (a PUT's come in from the client and go out to the functions,
  a GET's the other way), booked from the request's arrival so the daemon's own work
  overlaps the transfer; standing for one VM per daemon. Each metadata shard holds
  each round of replies to the same model at ``--shard-bandwidth-mbps`` by the round's
  bytes in and out: one VM per shard, the cap scaled down (a shard's RPCs are ~200
  bytes, so a real NIC never binds; the cap is what one shard VM serves, chosen so that
  four fit in this host's cores) -- it shows whether routing and the clients add a
  shared bottleneck, not what a VM's NIC does. 4 KiB operations move too few bytes for
  the daemons' cap to bind: their modelled figures are CPU-bound like the physical ones.

Keys of the JSON (one object, the last line with ``--json``): ``daemons: {"1": {"physical":
{...}, "modelled": {...}}, ...}`` (``get_mib_s``, ``put_mib_s``, ``get_4k_ops_s``,
``put_4k_ops_s``, ``client_cpu_cores`` and ``daemon_cpu_cores`` per phase, and
``link_held_share``: seconds the modelled NICs held requests per daemon and second of the
phase, summed over its concurrent requests -- near 0 the cap did not bind and the figure
is the host's CPU, not the model),
``shards: {"1": {"physical": {"ops_s", "client_cpu_cores", "server_cpu_cores"},
"modelled": {...}}, ...}``, ``efficiency_4_daemons`` (modelled 100 MiB GET at 4 over 4 x
at 1; ``efficiency_4_daemons_by_metric`` for the others), ``efficiency_4_shards``,
``physical_2_daemons_get_ratio`` (100 MiB GET, 2 daemon processes over 1, no cap: the median
of ``--rounds`` rounds that alternate a 1-daemon and a 2-daemon set started together, so load
from elsewhere on the machine hits both alike; each round's in ``physical_2_daemons_get_ratios``,
the one-off from the table in ``physical_2_daemons_get_ratio_table``),
``per_core_efficiency``, ``model`` (what the model is), ``targets``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from funcsion_rpc.errors import InvalidRequest

__all__ = ["HELP", "add_arguments", "run", "MODEL"]

HELP = ("measure scale-out: aggregate PUT/GET throughput with 1, 2, 4 daemon processes and metadata calls with "
        "1, 2, 4 shards, on this host and with a modelled per-host network cap")

MODEL = ("modelled: one VM per daemon process and per metadata shard, each a full-duplex NIC of the given MB/s "
         "(10^6 bytes/s) each way, a token bucket 50 ms deep (storage_functions.throttle.HostLink): a daemon "
         "answers a GET or PUT once its coded bytes are through it (booked from the request's arrival), a shard "
         "sends a round's replies once the round's bytes in and out are; the processes still share this host's "
         "cores")

TARGETS = {"efficiency_4_daemons": 0.9, "efficiency_4_shards": 0.9, "physical_2_daemons_get_ratio": 1.3}


def _counts(text: str, what: str) -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise InvalidRequest(f"--{what} wants counts like 1,2,4, got {text!r}") from None
    if not out or out[0] < 1 or out[-1] > 16:
        raise InvalidRequest(f"--{what}: counts from 1 to 16, got {text!r}")
    if out[0] != 1:
        out.insert(0, 1)  # every ratio is over one
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = MODEL
    p.add_argument("--daemons", default="1,2,4", help="daemon process counts (default 1,2,4)")
    p.add_argument("--shards", default="1,2,4", help="metadata shard counts (default 1,2,4)")
    p.add_argument("--host-bandwidth-mbps", type=float, default=125.0, metavar="MB/S",
                   help="the modelled NIC of each daemon's VM, MB/s each way (default 125: 1 Gbit/s)")
    p.add_argument("--shard-bandwidth-mbps", type=float, default=0.2, metavar="MB/S",
                   help="the modelled NIC of each metadata shard's VM, MB/s each way (default 0.2: about 1,100 "
                        "get calls a second, so that four shards fit in two cores)")
    p.add_argument("--clients", type=int, default=4,
                   help="data load-generator processes, each with a thread per daemon (default 4)")
    p.add_argument("--clients-per-shard", type=int, default=2,
                   help="metadata load-generator processes per shard, each with its own run (default 2)")
    p.add_argument("--large-mib", type=int, default=100, help="the large objects, MiB (default 100)")
    p.add_argument("--objects", type=int, default=1,
                   help="large objects per load generator and daemon (default 1)")
    p.add_argument("--seconds", type=float, default=3.0, help="length of each timed phase (default 3)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds alternating 1 and 2 daemon processes for physical_2_daemons_get_ratio (default 3; "
                        "0: the ratio of the table's one-off figures)")
    p.add_argument("--d", type=int, default=10, help="data chunks (default 10)")
    p.add_argument("--p", type=int, default=2, help="parity chunks (default 2)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 2 MiB objects, code 2+1, 2 load generators, 0.5 s phases")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")


def _data_row(res: dict[str, Any]) -> dict[str, Any]:
    return {"get_mib_s": round(res["get_large"]["mib_per_s"], 1), "put_mib_s": round(res["put_large"]["mib_per_s"], 1),
            "get_4k_ops_s": round(res["get_small"]["units_per_s"], 1),
            "put_4k_ops_s": round(res["put_small"]["units_per_s"], 1),
            "client_cpu_cores": {k: round(v["client_cpu_cores"], 3) for k, v in res.items()},
            "daemon_cpu_cores": {k: round(v["daemon_cpu_cores"], 3) for k, v in res.items()},
            "link_held_share": {k: round(v["link_held_share"], 3) for k, v in res.items()}}


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b > 0 else None


def run(args: argparse.Namespace) -> int:
    import statistics

    from ._bench_scale_data import DataShape, paired_gets, run_daemons
    from ._bench_scale_meta import run_shards

    daemons, shards = _counts(args.daemons, "daemons"), _counts(args.shards, "shards")
    if args.quick:
        shape = DataShape(clients=2, k=1, large=2 << 20, seconds=0.5, d=2, p=1, max_small=2000)
    else:
        shape = DataShape(clients=args.clients, k=args.objects, large=args.large_mib << 20, seconds=args.seconds,
                          d=args.d, p=args.p)
    if min(shape.clients, shape.k, shape.large, shape.d, args.clients_per_shard) < 1 or shape.p < 0 or args.rounds < 0 \
            or shape.seconds <= 0 or args.host_bandwidth_mbps <= 0 or args.shard_bandwidth_mbps <= 0:
        raise InvalidRequest("--clients, --clients-per-shard, --objects, --large-mib, --d, --seconds and both "
                             "bandwidths must be positive, --p at least 0")
    cpus = os.cpu_count() or 1
    doc: dict[str, Any] = {
        "model": {"text": MODEL, "host_bandwidth_mbps": args.host_bandwidth_mbps,
                  "shard_bandwidth_mbps": args.shard_bandwidth_mbps},
        "shape": {"clients": shape.clients, "objects_per_client_and_daemon": shape.k, "large_bytes": shape.large,
                  "small_bytes": shape.small, "seconds": shape.seconds, "code": f"{shape.d}+{shape.p}",
                  "clients_per_shard": args.clients_per_shard},
        "cpus": cpus, "load_before": [round(x, 2) for x in os.getloadavg()], "daemons": {}, "shards": {}}
    for n in daemons:
        doc["daemons"][str(n)] = {kind: _data_row(run_daemons(n, shape, mbps))
                                  for kind, mbps in (("physical", 0.0), ("modelled", args.host_bandwidth_mbps))}
        _say(f"{n} daemon(s): " + _fmt_data(doc["daemons"][str(n)]))
    seconds = 0.5 if args.quick else args.seconds
    for m in shards:
        row = {}
        for kind, mbps in (("physical", 0.0), ("modelled", args.shard_bandwidth_mbps)):
            r = run_shards(m, args.clients_per_shard, 50 if args.quick else 200, seconds, mbps)
            row[kind] = {"ops_s": round(r["units_per_s"], 1), "clients": int(r["clients"]),
                         "client_cpu_cores": round(r["client_cpu_cores"], 3),
                         "server_cpu_cores": round(r["server_cpu_cores"], 3)}
        doc["shards"][str(m)] = row
        _say(f"{m} shard(s): physical {row['physical']['ops_s']:.0f} get/s (clients {row['physical']['client_cpu_cores']}"
             f" cores, shards {row['physical']['server_cpu_cores']}), modelled {row['modelled']['ops_s']:.0f} get/s")
    rounds = 1 if args.quick else args.rounds
    ratios = [round(r, 3) for r in paired_gets(shape, rounds)] if rounds > 0 and 2 in daemons else []
    doc["load_after"] = [round(x, 2) for x in os.getloadavg()]
    doc.update(_figures(doc, cpus))
    doc["physical_2_daemons_get_ratio_table"] = doc["physical_2_daemons_get_ratio"]
    doc["physical_2_daemons_get_ratios"] = ratios
    if ratios:
        doc["physical_2_daemons_get_ratio"] = round(statistics.median(ratios), 3)
        _say(f"100 MiB GET, 2 daemon processes over 1, {len(ratios)} alternating rounds: {ratios}")
    doc["targets"] = {k: {"target": v, "met": doc[k] is not None and doc[k] >= v} for k, v in TARGETS.items()}
    _say(MODEL)
    _say(", ".join(f"{k} {doc[k]} (target {v})" for k, v in TARGETS.items()) +
         f"; machine load {doc['load_before']} -> {doc['load_after']} on {cpus} cores")
    if args.json:
        sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


def _figures(doc: dict[str, Any], cpus: int) -> dict[str, Any]:
    """The ratios: modelled efficiency at 4, physical 2-over-1, per-core efficiency."""
    d, s = doc["daemons"], doc["shards"]
    metrics = ("get_mib_s", "put_mib_s", "get_4k_ops_s", "put_4k_ops_s")
    out: dict[str, Any] = {"efficiency_4_daemons": None, "efficiency_4_daemons_by_metric": None,
                           "efficiency_4_shards": None, "physical_2_daemons_get_ratio": None}
    if "4" in d:
        by = {k: _ratio(d["4"]["modelled"][k], 4 * d["1"]["modelled"][k]) for k in metrics}
        out["efficiency_4_daemons"], out["efficiency_4_daemons_by_metric"] = by["get_mib_s"], by
    if "4" in s:
        out["efficiency_4_shards"] = _ratio(s["4"]["modelled"]["ops_s"], 4 * s["1"]["modelled"]["ops_s"])
    if "2" in d:
        out["physical_2_daemons_get_ratio"] = _ratio(d["2"]["physical"]["get_mib_s"], d["1"]["physical"]["get_mib_s"])
    out["per_core_efficiency"] = {
        "daemons": {n: {k: _ratio(row["physical"][k], min(int(n), cpus) * d["1"]["physical"][k]) for k in metrics}
                    for n, row in d.items()},
        "shards": {n: _ratio(row["physical"]["ops_s"], min(int(n), cpus) * s["1"]["physical"]["ops_s"])
                   for n, row in s.items()}}
    return out


def _fmt_data(row: dict[str, Any]) -> str:
    parts = []
    for kind in ("physical", "modelled"):
        r = row[kind]
        parts.append(f"{kind} GET {r['get_mib_s']:.0f} MiB/s PUT {r['put_mib_s']:.0f} MiB/s, 4 KiB GET "
                     f"{r['get_4k_ops_s']:.0f}/s PUT {r['put_4k_ops_s']:.0f}/s (GET: clients "
                     f"{r['client_cpu_cores']['get_large']} cores, daemons {r['daemon_cpu_cores']['get_large']}"
                     + (f", held by the NICs {r['link_held_share']['get_large']}" if kind == "modelled" else "") + ")")
    return "; ".join(parts)


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
