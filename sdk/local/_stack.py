"""The embedded stack: a metadata server, the SION daemon with its local
Lambda platform and a local COS directory, and the daemon's control loop
between them, all started from one ``Config``.

The metadata server decides when objects expire; the daemon holds their
bytes. The control loop (``storage_functions.daemon.Follower``, the same one
``funcsion serve daemon --metadata`` runs) carries the server's storage
instructions to the daemon and acknowledges them (see its module for what each
does); here the server's listener wakes it the moment an instruction is
emitted, so drops reach the functions at once. Capacity: each storage function
of the daemon's pool offers ``DaemonConfig.capacity // block_size`` blocks to
the allocator; the first function group is registered and warm before the
first put. Lifetimes: the metadata server predicts with the models of
``lifetime_models`` (then those shipped with funcsion) and records every
successful run's measured lifetimes under ``lifetime_data`` (``attach_lifetimes``).
At start the control loop sweeps the COS copies and buffer files of
every run the metadata server does not know as running, and the stack ends every run
whose driver died (``_drivers``: a ``funcsion run`` killed with its embedded stack), so
their data goes now, not at their TTL.

``Stack`` runs in the calling process (threads plus the platform's worker
processes; with ``daemon_process`` the daemon, its platform and its control
loop run in a child process, ``_daemon_proc``, that ``restart_daemon`` kills
with -9 and starts again) and holds the state directory's lock (``_statedir``) while it
runs: a second stack on the same directory fails at once. ``funcsion up``
runs one in a background process and writes its endpoints to
``<state_dir>/stack.json`` for later commands. The state directory and what
the stack writes there are private (0700 / 0600).

Host loss (``control_in_cos``, issue 31 item 4): every shard ships its journal and the daemon
its durable table to the stack's COS (``metadata_server._ship``, ``storage_functions.daemon
._control_ship``); ``kill_metadata(i)`` / ``kill_daemon(i)`` stand for losing the host of shard
``i`` / daemon ``i`` (the server's connections break at once, nothing more is shipped, its state
files are deleted), ``start_metadata(i)`` / ``start_daemon(i)`` start a replacement at the same
address and state id that restores from COS, and ``replace_metadata(i)`` / ``replace_daemon(i)``
do both. A metadata shard runs in this process, so its loss is a close of its server without a
reply more; a daemon needs ``daemon_process`` and is killed with -9 (its storage functions'
connections break, they end their invocations and exit: their memory dies with the daemon).
Meanwhile every SDK call waits for the replacement (config ``metadata_failover_s``,
``daemon_failover_s``). What a loss can lose is the shipping window: the journal records and
table records of the last ``control_in_cos`` seconds (0, synchronous: nothing answered). The
daemon answers a PUT only once its version is in COS (``DaemonConfig.durable_puts``, on with
``control_in_cos``), so no version a run can depend on lives only in the memory of functions
that die with it; without it, the versions whose upload had not finished
(``upload_delay_s``, ``parity_upload_delay_s``, the queue) would be lost with them.

TLS: with the config's ``tls_cert``/``tls_key``/``tls_ca`` (``FUNCSION_TLS_*``) both
servers serve TLS (the certificate must hold ``host``), the control loop and every
client verify them against the CA, and the endpoints (``stack.json``, each task's
event) carry the CA's PEM.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from funcsion_rpc.client import MetadataClient
from storage_functions.daemon._control import ORACLE_GRACE_S, RUN_END_REASONS, Follower
from storage_functions.private_files import open_private, private_dir

from .._client import Client, Endpoints, parse_addr
from .._config import Config
from ._control import MetadataSource, follow_shards
from ._drivers import end_orphaned_runs
from ._statedir import StateDirLock

__all__ = ["Stack", "daemon_layout", "default_daemons", "read_stack_file", "STACK_FILE"]

STACK_FILE = "stack.json"


class Stack:
    #: How long the ``oracle`` policy's drops wait (``Follower``); kept here for drivers.
    ORACLE_GRACE_S = ORACLE_GRACE_S
    #: Reasons of the drops the metadata server sends when a run ends or its TTL expires.
    RUN_END_REASONS = RUN_END_REASONS

    def __init__(self, config: Config, *, metadata_port: int | None = None, daemon_port: int | None = None,
                 journal: bool = True, daemon: Mapping[str, Any] | None = None,
                 daemon_process: bool | None = None, platform: Any = None, metadata_shards: int = 1,
                 control_in_cos: float | None = None, daemons: int = 1) -> None:
        """``daemon``: ``DaemonConfig`` fields to override (e.g. a small pool:
        ``{"max_functions": 12}``). ``daemon_process``: run the daemon (with its platform and
        control loop) in a child process that ``restart_daemon`` can kill -9 (default: when
        ``config.restart_daemon_after_s`` asks for it). ``platform``: what runs the storage
        functions instead of a local platform started here (anything with ``LocalPlatform``'s
        ``deploy`` and ``invoke_async``; the caller shuts it down; not with ``daemon_process``):
        the as-deployed tests run them from the storage zip. ``metadata_shards``: run that many
        metadata servers (shard 0 on ``metadata_port``, the others on free ports), each owning the
        runs and function groups ``funcsion_rpc.routing`` gives it; the daemon follows them all.
        ``control_in_cos``: ship every shard's journal and the daemon's table to COS within that many
        seconds (0: before each reply; None: they stay on this host), so that ``replace_metadata``
        and ``replace_daemon`` can stand for a host loss (the module docstring).
        ``daemons``: run that many daemons (``daemon_layout``: daemon-K owns functions
        ``sion-dK-I``, its COS copies under ``<cos_prefix>/daemon-K``, its state id daemon-K; the
        first on ``daemon_port``), each following every shard; the metadata server places each
        object on one of them (``metadata_server._daemons``)."""
        if control_in_cos is not None and not control_in_cos >= 0:
            raise ValueError(f"Stack: control_in_cos must be >= 0 seconds (0: synchronous) or None, got {control_in_cos!r}")
        if control_in_cos is not None and not journal:
            raise ValueError("Stack: control_in_cos ships the metadata journal: it needs journal=True")
        self.control_in_cos = control_in_cos
        self.shippers: list[Any] = []           # per shard: its journal's shipper to COS (None: not shipped)
        self.metadata_restores: list[Any] = []  # per shard: what its last start restored from COS (RestoreReport)
        self.metadata_replacements = [0] * metadata_shards
        self._cos: Any = None
        self._edge: Any = None
        if metadata_shards < 1:
            raise ValueError(f"Stack: metadata_shards must be at least 1, got {metadata_shards}")
        if daemons < 1:
            raise ValueError(f"Stack: daemons must be at least 1, got {daemons}")
        self.daemons = daemons
        self.stores: list[Any] = []             # one per daemon, in order (``store``: the first)
        self.metadata_shards = metadata_shards
        self.followers: list[Follower] = []
        self.handlers: list[Any] = []           # one per metadata shard, in shard order (as below)
        self.metadata_servers: list[Any] = []
        self.journals: list[Any] = []
        self.config = config
        self.root = Path(config.state_dir).resolve()
        self.metadata_port = config.metadata_port if metadata_port is None else metadata_port
        self.daemon_port = config.daemon_port if daemon_port is None else daemon_port
        self.use_journal = journal
        self.admin_token = secrets.token_hex(16)
        self.daemon_overrides = dict(daemon or {})
        self._started = False
        self.follower: Follower | None = None
        self.daemon_process = config.restart_daemon_after_s > 0 if daemon_process is None else daemon_process
        if platform is not None and self.daemon_process:
            raise ValueError("Stack: a given platform runs in this process, not with daemon_process")
        self._given_platform = platform
        self.platform: Any = None
        self.store: Any = None  # a LocalStore, or a DaemonProcess (daemon_process)
        self._lock = StateDirLock(self.root)
        self.orphans_ended: list[str] = []  # runs the start ended because their driver had died

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> Stack:
        cfg = self.config
        self._lock.acquire()  # before anything opens the journal; StateDirBusy when another stack has it
        try:
            self._start(cfg)
            self.orphans_ended = [r for md in self._admin.shard_clients     # their drivers died
                                  for r in end_orphaned_runs(self.root, md)]
        except BaseException:
            if self._started:
                self.stop()  # releases the lock too
            self._lock.release()
            raise
        return self

    def _start(self, cfg: Config) -> None:
        from dataclasses import replace

        from storage_functions.daemon import DaemonConfig, LocalStore
        from storage_functions.local import LocalPlatform, PlatformConfig

        private_dir(self.root / "logs")
        self._edge = self._tls(cfg)
        n = self.metadata_shards
        if self.control_in_cos is not None:
            from storage_functions.cos import open_cos

            self._cos = open_cos(cfg.resolved_cos_url)
        self.handlers, self.metadata_servers, self.journals = [None] * n, [None] * n, [None] * n
        self.shippers, self.metadata_restores = [None] * n, [None] * n
        for k in range(n):      # shard k: metadata-k (its journal: metadata.journal for shard 0, as always)
            self._open_shard(k, self.metadata_port if k == 0 else 0)
        self.journal, self.handler, self.metadata_server = self.journals[0], self.handlers[0], self.metadata_servers[0]
        platform: dict[str, Any] = {"idle_reclaim_s": (cfg.idle_reclaim_min_s, cfg.idle_reclaim_max_s), "kill_rate": cfg.kill_rate,
                    "kill_functions": "sion-*", "log_dir": str(self.root / "logs")}
        dcfg = DaemonConfig(host=cfg.host, port=self.daemon_port, block_size=cfg.block_size,
                            memory_grain=cfg.memory_grain, function_memory_mb=cfg.function_memory_mb, max_object_bytes=cfg.max_object_size,
                            cos_url=cfg.resolved_cos_url, buffer_dir=str(self.root / "buffer"),
                            placement="metadata",  # the metadata server decides where every chunk lives
                            state_id=cfg.daemon_state_id,  # its control state's name in COS (when shipped)
                            persist_ttl_s=cfg.persist_ttl_s, control_ship_lag_s=self.control_in_cos,
                            # with control state in COS, no answered PUT lives only on this host
                            durable_puts=self.control_in_cos is not None,
                            tls_cert=cfg.tls_cert, tls_key=cfg.tls_key, tls_ca=cfg.tls_ca if cfg.tls_cert else "")
        if n > 1 or self.daemons > 1:   # each shard, each daemon owns whole erasure-code groups of functions
            dcfg = replace(dcfg, group_size=cfg.ec_data + cfg.ec_parity)
        if self.daemon_overrides:
            dcfg = replace(dcfg, **self.daemon_overrides)
        dcfg = replace(dcfg, token=dcfg.token or secrets.token_hex(16))    # every daemon checks the same tokens
        layouts = daemon_layout(dcfg, self.daemons, default_state_id=cfg.daemon_state_id == "daemon-0")
        if self.daemon_process:
            self._start_daemon_process(layouts, platform)
            return
        self.platform = self._given_platform or LocalPlatform(PlatformConfig(**platform))
        self.stores = []
        for k, d in enumerate(layouts):
            self.stores.append(LocalStore(str(self.root / _suffixed("store", k)), config=d,
                                          platform=self.platform).start())
            if k == 0:
                self.store = self.stores[0]
        self.daemon_config = self.store.config
        self._started = True
        self._admin = Client(self.endpoints)
        self.followers = []
        for store in self.stores:
            if n == 1:
                host, port = parse_addr(self.endpoints.metadata)
                mine = [Follower(MetadataSource(MetadataClient(host, port, admin_token=self.admin_token,
                                                               tls_ca=self.tls_ca, retry_stale=False),
                                                store.config.daemon_id),
                                 store.daemon, poll_s=0.5)]  # the listener below wakes it at once
            else:       # one control loop per shard, each registering the groups its shard owns
                mine = follow_shards(store.daemon, self.endpoints.metadata, self.admin_token,
                                     tls_ca=self.tls_ca, poll_s=0.5)
            self.followers += mine
            for follower, handler in zip(mine, self.handlers):
                # the first group is up before the first put (as a warm pool would be): a put never waits
                # for a cold start, and memory is held from the moment the allocator hands it out
                store.daemon.wait_warm(follower.hello(), timeout_s=20.0)
                handler.add_listener(follower.wake)
                follower.start()
        self.follower = self.followers[0]

    def _journal_path(self, k: int) -> Path:
        return self.root / ("metadata.journal" if k == 0 else f"metadata-{k}.journal")

    def _shard_state_id(self, k: int) -> str:
        """Shard k's name in COS: the configured one, ``metadata-k`` for shard k of several left at
        the default (as ``funcsion serve metadata --shard K/M`` names it)."""
        configured = self.config.metadata_state_id
        return f"metadata-{k}" if self.metadata_shards > 1 and configured == "metadata-0" else configured

    def _open_shard(self, k: int, port: int) -> None:
        """Start metadata shard ``k`` listening on ``port`` (0: a free one), from its journal; with
        ``control_in_cos`` and no journal on disk (a new host), restored from COS first."""
        from lifetime_model import BUNDLED_MODELS
        from metadata_server import (Journal, JournalShipper, MetadataHandler, MetadataServer, MetadataState,
                                     attach_lifetimes, control_prefix, restore_journal)

        cfg, n = self.config, self.metadata_shards
        state = MetadataState(block_size=cfg.block_size, data_chunks=cfg.ec_data, parity_chunks=cfg.ec_parity,
                              memory_budget=cfg.memory_budget_mb << 20, wds_limits=cfg.wds_limits(),
                              memory_grain=cfg.memory_grain, shard=k, shards=n)
        journal = shipper = None
        if self.use_journal:
            path = self._journal_path(k)
            if self._cos is not None:
                prefix = control_prefix("", "metadata", self._shard_state_id(k))
                snapshot = path.with_name(path.name + ".snapshot")
                if not (path.exists() and path.stat().st_size) and not snapshot.exists():
                    self.metadata_restores[k] = restore_journal(self._cos, prefix, path)
            journal = Journal(str(path))
            if self._cos is not None:
                shipper = JournalShipper(journal, self._cos, prefix, lag_s=self.control_in_cos or 0.0)
                shipper.restored = self.metadata_restores[k]
        self.journals[k], self.shippers[k] = journal, shipper
        handler = MetadataHandler(state, journal=journal, admin_token=self.admin_token,
                                  default_ttl_s=cfg.run_ttl_s)
        if shipper is not None:
            if shipper.synchronous:
                handler.after_journal = shipper.ship_once   # each round's journal write, before its replies
            shipper.ship_once()                             # the new generation, before the first reply
            shipper.start()
        self.handlers[k] = handler
        lifetimes = attach_lifetimes(handler, data_dir=cfg.resolved_lifetime_data,
                                     models_dirs=[cfg.resolved_lifetime_models, BUNDLED_MODELS],
                                     retrain_every=cfg.retrain_every)
        if k == 0:
            self.lifetimes = lifetimes
        self.metadata_servers[k] = MetadataServer(handler, cfg.host, port, edge=self._edge).start()

    # -- losing a host (tests, chaos) ---------------------------------------------------
    def kill_metadata(self, i: int, *, lose_state: bool = True) -> None:
        """Lose metadata shard ``i``'s host: its server stops at once (open connections break,
        no reply more), nothing more is shipped to COS, and with ``lose_state`` its journal and
        snapshot are deleted. Its runs' calls wait (``metadata_failover_s``) until
        ``start_metadata(i)``; the other shards' runs go on."""
        self._shard_index(i)
        server, shipper, journal = self.metadata_servers[i], self.shippers[i], self.journals[i]
        server.close()              # the loop ends; an answered round was shipped first (synchronous)
        if shipper is not None:
            shipper.halt()          # a killed process ships nothing more
        if journal is not None:
            journal.close()
        if lose_state:
            path = self._journal_path(i)
            for f in (path, path.with_name(path.name + ".snapshot")):
                f.unlink(missing_ok=True)

    def start_metadata(self, i: int) -> None:
        """Start a replacement for metadata shard ``i`` at the same address and state id: with its
        journal gone, it restores it from COS (``metadata_restores[i]``); the daemon's control loop
        for the shard follows the new process (its cursor starts again: ``Follower``)."""
        self._shard_index(i)
        old = self.metadata_servers[i]
        self._open_shard(i, old.port)
        self.metadata_replacements[i] += 1
        if i == 0:
            self.journal, self.handler, self.metadata_server = self.journals[0], self.handlers[0], self.metadata_servers[0]
        if self.followers and not self.daemon_process:     # in-process control loops: the new listener
            self.handlers[i].add_listener(self.followers[i].wake)
            self.followers[i].wake()

    def replace_metadata(self, i: int) -> None:
        """``kill_metadata(i)`` (its state directory lost), then ``start_metadata(i)``."""
        self.kill_metadata(i)
        self.start_metadata(i)

    def _shard_index(self, i: int) -> None:
        if not 0 <= i < self.metadata_shards:
            raise IndexError(f"this stack runs metadata shards 0..{self.metadata_shards - 1}, not {i}")
        if self._cos is None:
            raise RuntimeError("a replacement restores from COS: start the stack with control_in_cos=SECONDS")

    def _daemon_index(self, i: int) -> Any:
        from ._daemon_proc import DaemonProcess

        if not 0 <= i < len(self.stores):
            raise IndexError(f"this stack runs daemons 0..{len(self.stores) - 1}, not daemon {i}")
        store = self.stores[i]
        if not isinstance(store, DaemonProcess):
            raise RuntimeError("losing a daemon needs a stack started with daemon_process=True")
        if self._cos is None:
            raise RuntimeError("a replacement restores from COS: start the stack with control_in_cos=SECONDS")
        return store

    def kill_daemon(self, i: int = 0, *, lose_state: bool = True) -> None:
        """Lose daemon ``i``'s host: kill -9 its process (its storage functions lose their
        connections, end their invocations and exit: their memory is gone) and with
        ``lose_state`` delete its state directory (buffer, durable table). Data calls wait
        (``daemon_failover_s``) until ``start_daemon(i)``."""
        proc = self._daemon_index(i)
        proc.kill()
        if lose_state:
            import shutil

            for d in (proc.config.buffer_dir, proc.root):
                if d:
                    shutil.rmtree(d, ignore_errors=True)

    def start_daemon(self, i: int = 0) -> None:
        """Start a replacement for daemon ``i`` with the same id, address, token and COS prefix: it
        restores its table from COS (its stats' ``table_restored_from_cos_bytes``), reads the objects
        whose functions died from their COS copies, and follows the metadata shards again."""
        proc = self._daemon_index(i)
        Path(proc.root).mkdir(parents=True, exist_ok=True, mode=0o700)
        proc.start()
        proc.restarts += 1

    def replace_daemon(self, i: int = 0) -> None:
        """``kill_daemon(i)`` (its state directory lost), then ``start_daemon(i)``."""
        self.kill_daemon(i)
        self.start_daemon(i)

    def _tls(self, cfg: Config) -> Any:
        """The metadata server's TLS edge factory (None: plaintext); sets ``tls_ca`` (PEM text)."""
        self.tls_ca = ""
        if not cfg.tls_cert:
            return None
        from storage_functions import tls

        from .._config import ConfigError

        if not (cfg.tls_key and cfg.tls_ca):
            raise ConfigError("config field 'tls_cert' needs tls_key and tls_ca too (FUNCSION_TLS_KEY, "
                              "FUNCSION_TLS_CA): the certificate's key, and the CA clients verify it with")
        self.tls_ca = tls.read_pem(cfg.tls_ca, "tls_ca")
        tls.check_certificate(cfg.tls_cert, cfg.tls_key, cfg.host, self.tls_ca)
        ctx = tls.server_context(cfg.tls_cert, cfg.tls_key)
        return lambda deliver: tls.TlsAcceptor(ctx, deliver)

    def _start_daemon_process(self, layouts: list[Any], platform: dict[str, Any]) -> None:
        from ._daemon_proc import DaemonProcess

        self.stores = [DaemonProcess(str(self.root / _suffixed("store", k)), d, metadata=self._metadata_addresses(),
                                     admin_token=self.admin_token,
                                     platform=dict(platform, log_dir=str(self.root / _suffixed("logs", k))),
                                     log_path=str(self.root / "logs" / f"{_suffixed('daemon', k)}.log"))
                       for k, d in enumerate(layouts)]
        self.store = self.stores[0]
        self._started = True
        for k, store in enumerate(self.stores):
            if k:
                private_dir(self.root / _suffixed("logs", k))
            store.start()
        self.daemon_config = self.store.config
        self._admin = Client(self.endpoints)

    def restart_daemon(self, index: int = 0) -> None:
        """kill -9 daemon ``index``'s process and start it again (``daemon_process`` stacks
        only): it rebuilds its table from its durable log, its control loop follows the
        metadata server again."""
        from ._daemon_proc import DaemonProcess

        store = self.stores[index] if self.stores else self.store
        if not isinstance(store, DaemonProcess):
            raise RuntimeError("restart_daemon needs a stack started with daemon_process=True")
        store.restart()

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        for follower in self.followers:
            follower.close()
        if hasattr(self, "_admin"):
            self._admin.close()
        try:
            for store in reversed(self.stores or [self.store]):
                store.stop()
        finally:
            try:
                if self.platform is not None and self.platform is not self._given_platform:
                    self.platform.shutdown()
                for server in self.metadata_servers:
                    server.close()
                for shipper in self.shippers:
                    if shipper is not None:
                        shipper.stop()      # ships what is left
                for journal in self.journals:
                    if journal is not None:
                        journal.close()
                if self._cos is not None:
                    self._cos.close()
            finally:
                self._lock.release()

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what clients need ------------------------------------------------------------
    @property
    def endpoints(self) -> Endpoints:
        c = self.config
        return Endpoints(self._metadata_addresses(), self._daemon_addresses(), self.store.token, self.admin_token,
                         c.resolved_cos_url,
                         block_size=c.block_size, ec_data=c.ec_data, ec_parity=c.ec_parity,
                         tls_ca=getattr(self, "tls_ca", ""), metadata_failover_s=c.metadata_failover_s,
                         daemon_failover_s=c.daemon_failover_s)

    def _daemon_addresses(self) -> str:
        """``Endpoints.daemon``: the only daemon's HOST:PORT, or each daemon's ``ID=HOST:PORT`` in order."""
        stores = self.stores or [self.store]
        if len(stores) == 1:
            dh, dp = stores[0].address
            return f"{dh}:{dp}"
        return ";".join(f"{s.config.daemon_id}={s.address[0]}:{s.address[1]}" for s in stores)

    def _metadata_addresses(self) -> str:
        """The metadata servers' HOST:PORT in shard order, joined by ``;`` (``Endpoints.metadata``)."""
        return ";".join(f"{m.host}:{m.port}" for m in self.metadata_servers)

    def client(self) -> Client:
        """A driver client (admin token; bind it to a run with ``start_run``)."""
        return Client(self.endpoints)

    def write_stack_file(self) -> Path:
        path = self.root / STACK_FILE
        tmp = path.with_suffix(".tmp")
        ep = self.endpoints
        with open_private(tmp, "wb") as fh:  # tokens: 0600 from the first byte
            fh.write(json.dumps({"pid": os.getpid(), "metadata": ep.metadata, "daemon": ep.daemon,
                                 "daemons": [{"id": i or "daemon-0", "address": a} for i, a in ep.daemons],
                                 "store_token": ep.store_token, "admin_token": ep.admin_token,
                                 "cos_url": self.config.resolved_cos_url, "block_size": ep.block_size,
                                 "ec_data": ep.ec_data, "ec_parity": ep.ec_parity,
                                 **({"tls_ca": ep.tls_ca} if ep.tls_ca else {})}).encode())
        os.replace(tmp, path)
        return path

    # -- the control loop ------------------------------------------------------------
    @property
    def groups_registered(self) -> int:
        return sum(f.groups_registered for f in self.followers)

    @property
    def swept_runs(self) -> list[str]:
        """Runs whose leftovers the start-up sweep dropped."""
        return [r for f in self.followers for r in f.swept_runs or []]

    def pump_once(self) -> None:
        """One round of the control loop now (it runs on its own thread too; in a daemon
        process, only there)."""
        for follower in self.followers:
            follower.step()

    def drain(self, timeout_s: float = 10.0) -> None:
        """Carry out every instruction, deferred ones included (after a run ends); a daemon
        process's control loop does so on its own (``_leaked`` polls what it holds)."""
        for follower in self.followers:
            follower.drain(timeout_s)

    def stats(self) -> dict[str, Any]:
        """The first metadata shard's stats (each shard's: ``handlers[k]`` or its own admin client)."""
        return self._admin.metadata.stats()


def default_daemons(cores: int | None, max_functions: int, group_size: int) -> int:
    """``--daemons``' default: one per core, at most one per erasure-code group of functions
    (every daemon owns a whole group at least)."""
    return max(1, min(cores or 1, max_functions // max(1, group_size)))


def daemon_layout(base: Any, daemons: int, *, default_state_id: bool = True) -> list[Any]:
    """Each daemon's ``DaemonConfig`` from the stack's ``base``: one daemon is ``base`` itself.
    Several: daemon-K (its id, and its COS state id unless one was configured) owns
    ``max_functions // daemons`` functions in whole groups (at least one group; none fewer than
    a group is refused), named ``<prefix>-dK-I``, keeps its COS copies and control state under
    ``<cos_prefix>/daemon-K`` and listens on a port of its own (the first on ``base.port``)."""
    from dataclasses import replace

    if daemons == 1:
        return [base]
    group = base.group_size
    each = (base.max_functions // daemons) // group * group
    if each < group:
        raise ValueError(f"Stack: {daemons} daemons of {base.max_functions} storage functions leave a daemon less "
                         f"than one erasure-code group of {group}: run at most {base.max_functions // group} "
                         "daemons, or more functions (max_functions)")
    out = []
    for k in range(daemons):
        ident = f"daemon-{k}"
        out.append(replace(base, daemon_id=ident, function_prefix=f"{base.function_prefix}-d{k}", max_functions=each,
                           cos_prefix=f"{base.cos_prefix}/{ident}", port=base.port if k == 0 else 0,
                           state_id=ident if default_state_id else f"{base.state_id}-{k}",
                           buffer_dir=_suffixed(base.buffer_dir, k) if base.buffer_dir else None))
    return out


def _suffixed(name: str, k: int) -> str:
    """Daemon ``k``'s file or directory of the stack's ``name`` (daemon 0's is ``name``)."""
    return name if k == 0 else f"{name}-{k}"


def read_stack_file(state_dir: str | Path) -> dict[str, Any] | None:
    """The endpoints of a stack started by ``funcsion up``, or None when none is alive."""
    path = Path(state_dir) / STACK_FILE
    try:
        info = json.loads(path.read_text())
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError):
        return None
    return dict(info)
