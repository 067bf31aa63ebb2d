"""``funcsion serve metadata``: run the metadata server in the foreground.

Binds the config's ``host`` and ``metadata_port`` (127.0.0.1:7917) unless told
otherwise; every option left unset takes its config field (``FUNCSION_<FIELD>``,
funcsion.toml, default), as ``funcsion up`` does. Prints one line ``metadata
server listening on HOST:PORT`` once it accepts connections (``--json``: one
JSON object with ``address``, ``journal``, ``replayed`` and the ``admin_token``
when it generated one), after the generated admin token's line. With ``--journal`` every
change is journaled (an append-only log, one write per server round) and replayed at the
next start. SIGTERM or
Ctrl-C stops it cleanly (sockets closed, journal closed).

TLS (``sdk.cli._tls``): ``--tls-cert PATH --tls-key PATH`` serve TLS
(``storage_functions.tls.TlsAcceptor`` at the server's edge); the certificate must
hold ``--advertise HOST`` (default: the bound host), checked at start against
``--tls-ca`` when given. Bound off loopback without a certificate it refuses to
start unless given ``--insecure``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

from funcsion_rpc.errors import InvalidRequest
from funcsion_rpc.limits import DEFAULT_MAX_FRAME_BYTES, MAX_WDS_BYTES, MIN_MAX_FRAME_BYTES
from sdk._config import Config
from sdk._constants import ENV_ADMIN_TOKEN, ENV_METADATA_JOURNAL, ENV_METADATA_MAX_FRAME_BYTES

from ._tls import add_tls_arguments, tls_settings

__all__ = ["HELP", "add_arguments", "run"]

HELP = "run the metadata server (read counts, deferred commit, allocation) in the foreground"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def _shard(text: str) -> tuple[int, int]:
    """``I/M``: shard I (from 0) of M."""
    i, sep, m = text.partition("/")
    if not sep or not i.isdigit() or not m.isdigit() or not 0 <= int(i) < int(m):
        raise argparse.ArgumentTypeError(f"expected I/M, shard I (0 to M-1) of M shards, e.g. 0/2; got {text!r}")
    return int(i), int(m)


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = Config()  # the defaults; an unset option takes FUNCSION_<FIELD>, then funcsion.toml, then these
    p.add_argument("--host", default=None,
                   help=f"address to bind (default: config host, {d.host})")
    p.add_argument("--port", type=int, default=None,
                   help=f"TCP port, 0 for any free one (default: config metadata_port, {d.metadata_port})")
    p.add_argument("--admin-token", default=os.environ.get(ENV_ADMIN_TOKEN, ""),
                   help=f"token for control calls (env {ENV_ADMIN_TOKEN}; default: a random one, printed)")
    p.add_argument("--journal", metavar="PATH", default=os.environ.get(ENV_METADATA_JOURNAL, ""),
                   help=f"journal replayed at start; an older SQLite journal is converted (env "
                        f"{ENV_METADATA_JOURNAL}; default: none)")
    p.add_argument("--journal-sync", choices=["off", "normal", "full"], default="normal",
                   help="normal survives a killed server, full also power loss (an fdatasync per round), "
                        "off holds up to 1 MiB in the process (benchmarks) (default normal)")
    p.add_argument("--state-id", metavar="NAME", default=None,
                   help=f"this server's stable identity: its journal is shipped to COS under "
                        f"control/metadata/NAME/ and a replacement with the same NAME restores from there "
                        f"(env FUNCSION_METADATA_STATE_ID; default: config metadata_state_id, {d.metadata_state_id}); "
                        "give each server of a deployment its own")
    p.add_argument("--cos-url", metavar="URL", default=None,
                   help="ship the journal (snapshot + log) to this COS (file:///dir or s3://bucket/prefix) and, "
                        "when the --journal file is missing, restore it from there first (env FUNCSION_COS_URL; "
                        "default: config cos_url; none: the journal stays on this host only)")
    p.add_argument("--control-ship-lag-s", type=float, default=None, metavar="SECONDS",
                   help="ship what the journal gained to COS this often, off the request path; a lost host "
                        "loses at most the requests answered in this window plus one upload; 0 ships each "
                        "round's journal write before its replies (nothing answered is lost; every round waits "
                        "one COS PUT) (env "
                        f"FUNCSION_CONTROL_SHIP_LAG_S; default: config control_ship_lag_s, {d.control_ship_lag_s:g})")
    p.add_argument("--block-size", type=_positive, default=None,
                   help=f"bytes per block (default: config block_size, {d.block_size})")
    p.add_argument("--data-chunks", type=_positive, default=None,
                   help=f"erasure-code data chunks d (default: config ec_data, {d.ec_data})")
    p.add_argument("--parity-chunks", type=int, default=None,
                   help=f"erasure-code parity chunks p (default: config ec_parity, {d.ec_parity})")
    p.add_argument("--memory-budget", type=_positive, default=None, metavar="BYTES",
                   help="past this many allocated bytes new objects go to the COS tier "
                        f"(default: config memory_budget_mb, {d.memory_budget_mb} MiB)")
    p.add_argument("--ttl", type=float, default=None, metavar="SECONDS",
                   help=f"default run TTL with no activity (default: config run_ttl_s, {d.run_ttl_s:g})")
    p.add_argument("--tick", type=float, default=1.0, metavar="SECONDS",
                   help="how often TTLs and leases are checked (default 1)")
    p.add_argument("--max-frame-bytes", type=_positive, metavar="BYTES",
                   default=os.environ.get(ENV_METADATA_MAX_FRAME_BYTES, str(DEFAULT_MAX_FRAME_BYTES)),
                   help=f"largest request the server reads; larger ones are refused unread (default "
                        f"{DEFAULT_MAX_FRAME_BYTES}, at least {MIN_MAX_FRAME_BYTES} so a {MAX_WDS_BYTES}-byte WDS "
                        "fits; env FUNCSION_METADATA_MAX_FRAME_BYTES)")
    p.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/M",
                   help="this server is metadata shard I (from 0) of M: it owns the runs and storage functions "
                        "whose rendezvous hash (funcsion_rpc.routing) names I, mints only such run ids and refuses "
                        "calls for the others; list the M shards in this order in every client's --stack "
                        "(default 0/1: the only one)")
    p.add_argument("--host-bandwidth-mbps", type=float, default=0.0, metavar="MB/S",
                   help="model this host's NIC: MB/s each way (10^6 bytes a second), a token bucket each round of "
                        "requests holds its replies to by its bytes in and out (storage_functions.throttle.HostLink); "
                        "for benchmarks that stand several shard processes on one host for one VM each "
                        "(`funcsion bench scale`); default 0: unlimited")
    p.add_argument("--advertise", metavar="HOST", default="",
                   help="the name or address clients dial; with --tls-cert the certificate must hold it "
                        "(default: the bound host)")
    add_tls_arguments(p)
    p.add_argument("--json", action="store_true",
                   help="print the address (and a generated admin token) as one JSON line")


def build(args: argparse.Namespace) -> Any:
    """The server and its journal, from parsed arguments (also used by tests); options left
    unset take the config's values (``FUNCSION_<FIELD>``, funcsion.toml, defaults)."""
    server, journal, shipper = build_served(args)
    if shipper is not None:
        shipper.ship_once()
    return server, journal


def _control_store(args: argparse.Namespace, cfg: Config) -> Any:
    """The COS the journal ships to (None: no --cos-url / cos_url, or no --journal)."""
    if not (args.journal and cfg.cos_url):
        return None
    from storage_functions.cos import open_cos

    return open_cos(cfg.cos_url)


def _state_id(configured: str, shard: int, shards: int) -> str:
    """The name of this server's control state in COS: the configured one, except that shard k of
    several left at the default ``metadata-0`` is ``metadata-k`` (two shards under one name would
    delete each other's journal generations)."""
    return f"metadata-{shard}" if shards > 1 and configured == "metadata-0" else configured


def build_served(args: argparse.Namespace) -> Any:
    """``build`` and the journal's shipper to COS (None without a journal or a COS URL): a
    missing journal is restored from COS first."""
    from lifetime_model import BUNDLED_MODELS
    from metadata_server import (Journal, JournalShipper, MetadataHandler, MetadataServer, MetadataState,
                                 attach_lifetimes, control_prefix, restore_journal)

    if args.parity_chunks is not None and args.parity_chunks < 0:
        raise InvalidRequest(f"--parity-chunks must be >= 0, got {args.parity_chunks}")
    if (args.ttl is not None and args.ttl <= 0) or args.tick <= 0:
        raise InvalidRequest("--ttl and --tick must be positive")
    mbps = float(getattr(args, "host_bandwidth_mbps", 0.0) or 0.0)
    if mbps < 0:
        raise InvalidRequest(f"--host-bandwidth-mbps must be >= 0 (0: unlimited), got {mbps:g}")
    if args.port is not None and not 0 <= args.port <= 65535:
        raise InvalidRequest(f"--port must be 0..65535, got {args.port}")
    cfg = Config.load(host=args.host, metadata_port=args.port, block_size=args.block_size,
                      ec_data=args.data_chunks, ec_parity=args.parity_chunks, run_ttl_s=args.ttl,
                      metadata_state_id=getattr(args, "state_id", None), cos_url=getattr(args, "cos_url", None),
                      control_ship_lag_s=getattr(args, "control_ship_lag_s", None))
    edge = _tls_edge(args, cfg.host)
    budget = args.memory_budget if args.memory_budget is not None else cfg.memory_budget_mb << 20
    state = MetadataState(block_size=cfg.block_size, data_chunks=cfg.ec_data, memory_grain=cfg.memory_grain,
                          parity_chunks=cfg.ec_parity, memory_budget=budget,
                          wds_limits=cfg.wds_limits(),  # wds_max_*: funcsion.toml, FUNCSION_WDS_*
                          shard=getattr(args, "shard", (0, 1))[0], shards=getattr(args, "shard", (0, 1))[1])
    store = _control_store(args, cfg)
    prefix = control_prefix("", "metadata", _state_id(cfg.metadata_state_id, state.shard, state.shards))
    restored = restore_journal(store, prefix, args.journal) if store is not None and _empty(args.journal) else None
    journal = Journal(args.journal, sync=args.journal_sync) if args.journal else None
    shipper = None
    if store is not None and journal is not None:
        shipper = JournalShipper(journal, store, prefix, lag_s=cfg.control_ship_lag_s)
        shipper.restored = restored
    handler = MetadataHandler(state, journal=journal, admin_token=args.admin_token, default_ttl_s=cfg.run_ttl_s)
    if shipper is not None and shipper.synchronous:
        handler.after_journal = shipper.ship_once   # each round's journal write, before its replies
    attach_lifetimes(handler, data_dir=cfg.resolved_lifetime_data, models_dirs=[cfg.resolved_lifetime_models,
                                                                                 BUNDLED_MODELS],
                     retrain_every=cfg.retrain_every)
    try:
        server = MetadataServer(handler, cfg.host, cfg.metadata_port, tick_interval_s=args.tick,
                                max_frame_bytes=args.max_frame_bytes, edge=edge, link=_link(mbps))
    except (OSError, ValueError) as exc:
        if journal is not None:
            journal.close()
        if isinstance(exc, ValueError):
            raise InvalidRequest(f"--max-frame-bytes (env FUNCSION_METADATA_MAX_FRAME_BYTES): {exc}") from None
        raise InvalidRequest(f"cannot listen on {cfg.host}:{cfg.metadata_port}: {exc.strerror or exc}") from None
    return server, journal, shipper


def _restored(shipper: Any) -> str | None:
    """The COS generation the journal was restored from at start (None: it was not)."""
    report = getattr(shipper, "restored", None)
    return f"{shipper.prefix}/{report.generation}" if report is not None and report.generation else None


def _empty(journal: str) -> bool:
    """Whether the journal at ``journal`` is missing (with its snapshot): a new or replaced host."""
    path = Path(journal)
    return not (path.exists() and path.stat().st_size) and not path.with_name(path.name + ".snapshot").exists()


def _link(mbps: float) -> Any:
    """The modelled NIC the server's rounds hold to (None: unlimited)."""
    if mbps <= 0:
        return None
    from storage_functions.throttle import HostLink

    return HostLink(mbps)


def _tls_edge(args: argparse.Namespace, host: str) -> Any:
    """The server's TLS edge factory (None: plaintext), its certificate checked against the name
    clients dial; raises ``FuncsionError`` subclasses with one line."""
    from storage_functions import tls

    t = tls_settings(args, host)
    if not t.serving:
        return None
    name = getattr(args, "advertise", "") or host
    if name in ("0.0.0.0", "::", ""):
        tls.server_context(t.cert, t.key)          # loads (a key that is not the certificate's fails)
    else:
        tls.check_certificate(t.cert, t.key, name, t.ca_pem)
    ctx = tls.server_context(t.cert, t.key)
    return lambda deliver: tls.TlsAcceptor(ctx, deliver)


def run(args: argparse.Namespace) -> int:
    generated = not args.admin_token
    if generated:
        args.admin_token = secrets.token_hex(16)
    server, journal, shipper = build_served(args)
    if shipper is not None:
        shipper.ship_once()                   # this process's generation is in COS before it answers
        shipper.start()
    from metadata_server import tune_gc_for_serving
    tune_gc_for_serving()                     # this process is the server: the replayed state stays put
    previous = signal.signal(signal.SIGTERM, lambda *_: server.stop())
    try:
        replayed = journal.seq if journal is not None else 0
        if getattr(args, "json", False):
            info: dict[str, Any] = {"address": f"{server.host}:{server.port}", "journal": args.journal or None,
                                    "replayed": replayed, "tls": server.tls,
                                    "restored_from": _restored(shipper)}
            if generated:
                info["admin_token"] = args.admin_token
            print(json.dumps(info), flush=True)
        else:
            if generated:
                print(f"admin token: {args.admin_token}", flush=True)
            where = f"journal {args.journal} ({replayed} events replayed)" if journal is not None else "no journal"
            if _restored(shipper):
                where += f", restored from COS {_restored(shipper)}"
            over = ", TLS" if server.tls else ""
            print(f"metadata server listening on {server.host}:{server.port} ({where}{over})", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.close()
        if shipper is not None:
            shipper.stop()                    # ships what is left
        if journal is not None:
            journal.close()
    print("metadata server stopped", file=sys.stderr, flush=True)
    return 0
