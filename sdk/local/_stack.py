"""The embedded stack: a metadata server, the SION daemon with its local
Lambda platform and a local COS directory, and the instruction pump between
them, all started from one ``Config``.

The metadata server decides when objects expire; the daemon holds their
bytes. The pump carries the server's storage instructions to the daemon
(``drop`` -> ``Daemon.free``, or a COS delete for an object of the COS tier;
``scale_out`` -> capacity for as many more function groups as the blocks asked
for is registered, and those functions are warmed up; ``release_function`` -> the
function, none of whose blocks is in use, leaves the pool at once) and acknowledges them, so
nothing stays in function memory after its object is freed. Capacity: each
storage function of the daemon's pool offers ``DaemonConfig.capacity //
block_size`` blocks to the allocator.

When a run ends or expires (its drops say ``run ended``/``run expired``) the
pump also has the daemon drop everything of the run (``Daemon.drop_run``:
COS copies and buffer files too, also those an earlier, killed process
left); at start the stack sweeps those of every run the metadata server does
not know as running (``Daemon.sweep_runs``).

``Stack`` runs in the calling process (threads plus the platform's worker
processes) and holds the state directory's lock (``_statedir``) while it
runs: a second stack on the same directory fails at once. ``funcsion up``
runs one in a background process and writes its endpoints to
``<state_dir>/stack.json`` for later commands. The state directory and what
the stack writes there are private (0700 / 0600).
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from storage_functions.cos import open_cos
from storage_functions.private_files import open_private, private_dir

from .._client import Client, Endpoints
from .._config import Config
from .._cos_io import tier_key
from ._statedir import StateDirLock

__all__ = ["Stack", "read_stack_file", "STACK_FILE"]

STACK_FILE = "stack.json"


class Stack:
    def __init__(self, config: Config, *, metadata_port: int | None = None, daemon_port: int | None = None,
                 journal: bool = True) -> None:
        self.config = config
        self.root = Path(config.state_dir).resolve()
        self.metadata_port = config.metadata_port if metadata_port is None else metadata_port
        self.daemon_port = config.daemon_port if daemon_port is None else daemon_port
        self.use_journal = journal
        self.admin_token = secrets.token_hex(16)
        self._stop = threading.Event()
        self._pump: threading.Thread | None = None
        self._started = False
        self.instructions_done = 0
        self.groups_registered = 0
        self._deferred: deque[tuple[float, tuple[str, str]]] = deque()
        self._lock = StateDirLock(self.root)
        self.swept_runs: list[str] = []  # runs whose leftovers the start-up sweep dropped

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> Stack:
        cfg = self.config
        self._lock.acquire()  # before anything opens the journal; StateDirBusy when another stack has it
        try:
            self._start(cfg)
        except BaseException:
            if self._started:
                self.stop()  # releases the lock too
            self._lock.release()
            raise
        return self

    def _start(self, cfg: Config) -> None:
        from metadata_server import Journal, MetadataHandler, MetadataServer, MetadataState
        from storage_functions.daemon import DaemonConfig, LocalStore
        from storage_functions.local import LocalPlatform, PlatformConfig

        private_dir(self.root / "logs")
        state = MetadataState(block_size=cfg.block_size, data_chunks=cfg.ec_data, parity_chunks=cfg.ec_parity,
                              memory_budget=cfg.memory_budget_mb << 20, wds_limits=cfg.wds_limits())
        self.journal = Journal(str(self.root / "metadata.journal")) if self.use_journal else None
        self.handler = MetadataHandler(state, journal=self.journal, admin_token=self.admin_token,
                                       default_ttl_s=cfg.run_ttl_s)
        self.metadata_server = MetadataServer(self.handler, cfg.host, self.metadata_port).start()
        self.platform = LocalPlatform(PlatformConfig(
            idle_reclaim_s=(cfg.idle_reclaim_min_s, cfg.idle_reclaim_max_s),
            kill_rate=cfg.kill_rate,
            kill_functions="sion-*", log_dir=str(self.root / "logs")))
        dcfg = DaemonConfig(host=cfg.host, port=self.daemon_port, block_size=cfg.block_size,
                            function_memory_mb=cfg.function_memory_mb, max_object_bytes=cfg.max_object_size,
                            cos_url=cfg.resolved_cos_url, buffer_dir=str(self.root / "buffer"),
                            placement="metadata")  # the metadata server decides where every chunk lives
        self.store = LocalStore(str(self.root / "store"), config=dcfg, platform=self.platform).start()
        self.daemon_config = self.store.config
        self._started = True
        self._admin = Client(self.endpoints)
        self._cos = open_cos(cfg.resolved_cos_url)
        # the first group is up before the first put (as a warm pool would be): a put never waits
        # for a cold start, and memory is held from the moment the allocator hands it out
        self.store.daemon.wait_warm(self.store.daemon.prewarm(self._register_group()), timeout_s=20.0)
        self._sweep()
        self._pump = threading.Thread(target=self._pump_loop, name="funcsion-pump", daemon=True)
        self._pump.start()

    def _sweep(self) -> None:
        """Drop what earlier stack processes left in COS and the buffer for runs that are not running."""
        running = {r["run_id"] for r in self._admin.metadata.stats().get("runs", []) if r.get("state") == "running"}
        self.swept_runs = self.store.daemon.sweep_runs(lambda run_id: run_id in running)

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        self._stop.set()
        if self._pump is not None:
            self._pump.join(timeout=10)
        self._admin.close()
        self._cos.close()
        try:
            self.store.stop()
        finally:
            try:
                self.platform.shutdown()
                self.metadata_server.close()
                if self.journal is not None:
                    self.journal.close()
            finally:
                self._lock.release()

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what clients need ------------------------------------------------------------
    @property
    def endpoints(self) -> Endpoints:
        h, p = self.metadata_server.host, self.metadata_server.port
        dh, dp = self.store.address
        return Endpoints(f"{h}:{p}", f"{dh}:{dp}", self.store.token, self.admin_token, self.config.resolved_cos_url)

    def client(self) -> Client:
        """A driver client (admin token; bind it to a run with ``start_run``)."""
        return Client(self.endpoints)

    def write_stack_file(self) -> Path:
        path = self.root / STACK_FILE
        tmp = path.with_suffix(".tmp")
        ep = self.endpoints
        with open_private(tmp, "wb") as fh:  # tokens: 0600 from the first byte
            fh.write(json.dumps({"pid": os.getpid(), "metadata": ep.metadata, "daemon": ep.daemon,
                                 "store_token": ep.store_token, "admin_token": ep.admin_token,
                                 "cos_url": self.config.resolved_cos_url}).encode())
        os.replace(tmp, path)
        return path

    # -- the pump ---------------------------------------------------------------------
    def _register_group(self) -> int:
        """Offer one more function group's blocks to the allocator; returns how many
        functions are registered now (it stops at the daemon's ``max_functions``)."""
        dc = self.daemon_config
        blocks = dc.capacity // dc.block_size
        start = self.groups_registered * dc.group_size
        end = min(start + dc.group_size, dc.max_functions)
        for i in range(start, end):
            self._admin.metadata.register_capacity(f"{dc.function_prefix}-{i}", blocks)
        if end > start:
            self.groups_registered += 1
        return max(end, start)

    def _scale_out(self, blocks: int) -> None:
        """At least ``blocks`` more blocks: whole groups, then warm their functions."""
        dc = self.daemon_config
        per_group = dc.group_size * (dc.capacity // dc.block_size)
        functions = self.groups_registered * dc.group_size
        for _ in range(max(1, -(-blocks // per_group))):
            functions = self._register_group()
        self.store.daemon.prewarm(functions)

    #: The ``oracle`` policy frees an object at its last *read*, before that reader has
    #: fetched the bytes; its drops wait this long so the read it counted can finish
    #: (its accounting already treats the object as freed: the baseline stays exact).
    ORACLE_GRACE_S = 2.0
    #: Reasons of the drops the metadata server sends when a run ends or its TTL expires.
    RUN_END_REASONS = ("run ended", "run expired")

    def pump_once(self) -> int:
        """Carry out every pending storage instruction; returns how many."""
        md = self._admin.metadata
        batch = md.fetch_instructions(self.instructions_done, 1000)
        now = time.monotonic()
        drops: list[tuple[str, str]] = []   # (tier, key); kept objects were copied out by the SDK
        ended = set()
        for i in batch:
            if i.kind == "drop" and i.reason in self.RUN_END_REASONS:
                ended.add(i.run_id)
            if i.kind == "drop":
                d = (i.tier or "memory", f"{i.run_id}/{i.object_name}")
                if "oracle" in i.reason:
                    self._deferred.append((now + self.ORACLE_GRACE_S, d))
                else:
                    drops.append(d)
        while self._deferred and self._deferred[0][0] <= now:
            drops.append(self._deferred.popleft()[1])
        if drops:
            self.store.daemon.free([key for tier, key in drops if tier != "cos"])
            for tier, key in drops:
                if tier == "cos":
                    run_id, _, name = key.partition("/")
                    self._cos.delete(tier_key(run_id, name))
        for run_id in sorted(ended):
            self.store.daemon.drop_run(run_id)
        want = sum(i.blocks for i in batch if i.kind == "scale_out")
        if want:
            self._scale_out(want)
        for i in batch:
            if i.kind == "release_function":  # scale-in: every block of it is free
                self.store.daemon.release_function(i.function_name)
        if batch:
            self.instructions_done = batch[-1].seq
            md.fetch_instructions(self.instructions_done, 0)  # acknowledge
        return len(batch)

    def drain(self, timeout_s: float = 10.0) -> None:
        """Carry out every instruction, deferred ones included (after a run ends)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.pump_once()
            if not self._deferred or time.monotonic() > deadline:
                return
            time.sleep(0.05)

    def _pump_loop(self) -> None:
        while not self._stop.wait(0.01):
            try:
                while self.pump_once():
                    pass
            except Exception:  # noqa: BLE001 - a transient failure; the next round retries (acks are seqs)
                if self._stop.is_set():
                    return

    def stats(self) -> dict[str, Any]:
        return self._admin.metadata.stats()


def read_stack_file(state_dir: str | Path) -> dict[str, Any] | None:
    """The endpoints of a stack started by ``funcsion up``, or None when none is alive."""
    path = Path(state_dir) / STACK_FILE
    try:
        info = json.loads(path.read_text())
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError):
        return None
    return dict(info)
