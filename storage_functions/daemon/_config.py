"""Daemon configuration: one dataclass, validated at construction, and the
address the storage functions dial back to (``advertise``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

__all__ = ["DaemonConfig", "split_address", "CHECK_STATE_ENV"]

MiB = 1 << 20
#: set to 1 (the test suite does) to assert the store core's invariants when a daemon stops
CHECK_STATE_ENV = "FUNCSION_DAEMON_CHECK_STATE"


@dataclass
class DaemonConfig:
    host: str = "127.0.0.1"
    port: int = 0
    token: str = ""
    function_prefix: str = "sion"
    max_functions: int = 48
    group_size: int = 12
    block_size: int = MiB
    # a function's memory backs a block grain by grain: a grain no entry lies on goes back
    # to the kernel (``runtime/_memory.py``); 0 (or the block size): whole blocks
    memory_grain: int = 4096
    function_memory_mb: int = 1536
    runtime_overhead_mb: int = 64  # interpreter + code, excluded from the capacity
    hardcap_fraction: float = 0.8  # the rest is kept for recovery (SION Sec. 5.3.1 note 3)
    idle_s: float = 2.0
    tick_ms: float = 1.0
    warm_interval_s: float = 60.0
    buffer_dir: str | None = None
    cos_url: str | None = None
    cos_prefix: str = "sion"
    upload_workers: int = 2
    # write-behind (``_upload_plan``): every version waits upload_delay_s before its COS upload
    # (0: at once, as SION); a version whose every stripe has parity waits parity_upload_delay_s
    # (its code covers the loss of up to p functions and the buffer holds it meanwhile), and is
    # never uploaded if it is freed by then (0: no such wait)
    upload_delay_s: float = 0.0
    parity_upload_delay_s: float = 2.0
    buffer_fsync: bool = False
    # control state in COS (``_control_ship``): the durable table is shipped under
    # <cos_prefix>/control/daemon/<state_id>/ every control_ship_lag_s (None: it stays on this
    # host only; 0: each record is shipped before the call it records returns), and a daemon
    # started with an empty buffer directory restores it from there. A host loss loses the
    # versions PUT in the last control_ship_lag_s, and the bytes of versions whose COS upload
    # had not finished (upload_delay_s, parity_upload_delay_s, the queue) except from function
    # memory that outlived the host
    state_id: str = "daemon-0"
    # a deployment of several daemons: this one's id (daemon-0, daemon-1, ...), registered with
    # its functions at the metadata server, which names it in every placement on them (""):
    # the deployment's only daemon, registered as always)
    daemon_id: str = ""
    control_ship_lag_s: float | None = None
    # a PUT is answered only once its version is in COS and the table records the copy (with
    # control_ship_lag_s = 0: shipped too): no version a run can depend on lives only on this
    # host, so losing it (its functions' memory with it) loses nothing answered. Uploads are then
    # due at once (upload_delay_s, parity_upload_delay_s and pack_linger_s do not apply: every
    # version is uploaded, none skipped for expiring first; the PUTs of a pipelined window still
    # go up as packs) and each PUT waits one COS PUT more
    durable_puts: bool = False
    # small in-memory versions of one run due together go up as one COS object (a pack) of at
    # most pack_max_bytes (0: one COS object per version, as SION); an uploader waits
    # pack_linger_s past the first due version so that versions PUT together travel together
    pack_max_bytes: int = 16 * MiB
    pack_linger_s: float = 0.01
    # the buffer holds versions up to buffer_memory_max_object bytes in memory (and appended
    # to a segment file), at most buffer_memory_bytes of them (past it: the segment only);
    # larger ones in a file of their own, written past the page cache (O_DIRECT) when
    # buffer_direct_io and the file system allows: written once and read back rarely, such a
    # file gains little from the page cache, whose new pages cost more than the copy into them
    # on a virtual machine; the buffer measures its direct writes and goes back to the page
    # cache on a disk slower than 250 MB/s (an EBS volume at its baseline)
    buffer_memory_bytes: int = 256 * MiB
    buffer_memory_max_object: int = MiB
    buffer_direct_io: bool = True
    max_object_bytes: int = 1 << 30
    large_threshold: int = 128 * 1024
    get_timeout_s: float = 10.0
    put_timeout_s: float = 30.0
    invoke_timeout_s: float = 15.0
    # PING revalidation (INFINICACHE Sec. 3-4): a request to a function whose connections have
    # been silent longer than ping_idle_s (0 = never) first PINGs it and waits ping_timeout_s
    # for the PONG; without one the instance is taken as gone (its connections closed, a new
    # one invoked) and the held requests fail at once (GETs ask other chunks, PUTs place
    # elsewhere), so a reclaimed or frozen instance costs one ping, not put_timeout_s. A
    # healthy instance ends its invocation after idle_s (2 s) without a request, so a live
    # connection is rarely silent for half of it: 1 s pings little while catching a frozen
    # instance before a request waits on it. The PONG comes from the small-queue thread
    # (never behind a large transfer) in about a round trip; 0.5 s leaves a loaded host's
    # scheduling delays far inside the bound (a wrong verdict costs an invocation and a
    # recovery) and is no longer than a GET's straggler wait
    ping_idle_s: float = 1.0
    ping_timeout_s: float = 0.5
    get_extra: int | None = 0  # chunks requested up front beyond d; None = all d+p
    get_straggler_s: float = 0.5  # no chunk for this long: ask every untried chunk (first-d of d+p)
    get_window: int = 3  # stripes a GET requests ahead of the first one not yet written to its client; 0 = all
    # object bytes a connection's pipelined GETs may have behind the one being written (each held
    # back after its first window of stripes); a GET past it waits for those before it
    get_pipeline_bytes: int = 16 << 20
    hello_timeout_s: float = 10.0  # a new connection's whole HELLO must arrive within this, or it is closed
    # connections waiting for their HELLO at once (one thread reads them all, ``_hello``); past
    # it the oldest is closed. Each costs a socket and at most 4 KiB until its HELLO is in
    hello_pending_max: int = 1024
    # a function busy-polls its small connection this long after a latency-bound request: a
    # single-slice GET or a PUT of at most 64 KiB (``runtime._handler.latency_bound``)
    spin_us: float = 500.0
    debug: bool = False
    # what the storage functions dial: "HOST" or "HOST:PORT"; "" = the bound address. Lambdas
    # dial OUT to the daemon, so on AWS this is an address of the daemon's VM they can reach
    advertise: str = ""
    # TLS (``storage_functions.tls``): the daemon's certificate chain and key (PEM files; both
    # or neither) and the deployment CA (a PEM file) whose text every storage function gets in
    # its invocation to verify the daemon by the advertised host; none: plaintext
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    # who decides where chunks live: "metadata" (the metadata server's allocator: every PUT
    # carries its placement, the daemon never invents one) or "daemon" (its own PlaceChunk;
    # a standalone daemon with no metadata server). Never both on one pool.
    placement: str = "daemon"
    # recovery (SION Sec. 5.5): above this many lost chunks, holding at least
    # parallel_recovery_min_mb (below it the function restores them alone in a second or two
    # at Lambda's ~75 MB/s, SION Fig. 18, and a group would only double the COS reads and
    # their CPU), a recovery group of
    # recovery_group_size other functions (0 = never) downloads copies in parallel, kept
    # recovery_keep_s after the storage function recovered; recover_workers downloads at
    # once per function; function_bandwidth_mbps models an instance's network bandwidth
    # for those downloads (0 = unlimited; the benchmarks set it, see DESIGN.md)
    parallel_recovery_threshold: int = 64
    parallel_recovery_min_mb: float = 128.0
    recovery_group_size: int = 8
    recovery_keep_s: float = 30.0
    recover_workers: int = 4
    function_bandwidth_mbps: float = 0.0
    # SION's sliding-window GC (``_gc``, Sec. 5.3): a GC round every gc_interval_s (0 = no
    # window: every function holding chunks is warmed every warm_interval_s); a GC bucket
    # stays gc_active rounds active (warmed every warm_interval_s), then gc_degraded rounds
    # degraded (sealed, warmed every degraded_warm_interval_s), then its functions are
    # released (their data stays in COS); chunks read on degraded functions move to the
    # newest bucket, compact_fraction of them (at most compact_max) per tick.
    # Defaults (H = 3 min, not SION's 18): a run of seconds sees no round (read counts free its
    # data); in runs of minutes to hours what nobody read for 2-3 minutes leaves memory (COS
    # keeps it; a read of it costs a COS GET) and a read while it is degraded keeps it; and
    # with the metadata server's placement (a bucket's functions are sealed at each round) the
    # newest bucket plus 1 + 2 older ones are 4 groups of 12: the default pool of 48 functions
    gc_interval_s: float = 60.0
    gc_active: int = 1
    gc_degraded: int = 2
    degraded_warm_interval_s: float = 300.0
    compact_fraction: float = 0.5
    compact_max: int = 64
    # cache functions for GET bursts (``_burst``, SION Sec. 5.3.3): a chunk GET whose function
    # has cache_queue_depth requests in flight goes to a cache function that loads the chunk
    # from COS into its demand cache and serves it; at most cache_copies per chunk (0 = off);
    # only chunks of at least cache_min_chunk bytes (small requests drain faster than a load)
    cache_queue_depth: int = 2
    cache_copies: int = 4
    cache_min_chunk: int = 128 * 1024
    # a version whose PUT says it has at least cache_prefetch_readers readers (the workflow
    # graph's read count: a broadcast) is uploaded at once and its data chunks loaded into
    # cache functions (as many copies as its readers would open, at most cache_copies) before
    # the readers' GETs arrive; 0 = never (copies open only as a burst queues)
    cache_prefetch_readers: int = 8
    # the modelled network bandwidth of an instance's GET replies (0 = unlimited; the
    # elasticity benchmark sets it, like function_bandwidth_mbps for downloads)
    function_send_mbps: float = 0.0
    # the modelled inbound bandwidth of an instance for the chunks PUTs send it (0 = unlimited),
    # and per function name an override of it: one straggler among fast functions (the
    # busy-aware placement's test and benchmark)
    function_recv_mbps: float = 0.0
    recv_mbps_overrides: dict[str, float] = field(default_factory=dict)
    # report the functions' queues to the metadata server with the control plane's fetches, so
    # its placement goes around busy functions (False: it places as if every function were idle)
    report_loads: bool = True
    # the modelled NIC of this daemon's host, MB/s each way (0 = unlimited): each client
    # request is held until its bytes are through (``throttle.HostLink``; a PUT's coded
    # bytes come in from the client and go out to the functions, a GET's come in from the
    # functions and go out to the client); ``funcsion bench scale`` sets it so that several
    # daemon processes on one host stand for one VM each
    host_bandwidth_mbps: float = 0.0
    # persisted copies (``put(..., persist=...)``, Pocket's PERSIST with a timeout): the
    # lifetime after its run ends of a copy put with persist=True (0 = until Client.delete),
    # and how often the sweep deletes the expired ones (``_persisted_io``)
    persist_ttl_s: float = 0.0
    persist_sweep_s: float = 1.0
    # assert the store core's invariants (StoreState.validate_state) at stop; None: from the
    # FUNCSION_DAEMON_CHECK_STATE environment variable (the test suite sets it)
    check_state: bool | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
                raise ValueError(f"DaemonConfig.{f.name} must be >= 0, got {v!r}")
        bad = {k: v for k, v in self.recv_mbps_overrides.items() if not isinstance(v, (int, float)) or v < 0}
        if bad:
            raise ValueError(f"DaemonConfig.recv_mbps_overrides must map function names to MB/s >= 0, got {bad!r}")
        if self.block_size < 4096:
            raise ValueError(f"DaemonConfig.block_size must be >= 4096, got {self.block_size}")
        if self.memory_grain and self.memory_grain < self.block_size and (
                self.memory_grain % 4096 or self.block_size % self.memory_grain):
            raise ValueError(f"DaemonConfig.memory_grain={self.memory_grain} must be 0 or a multiple of 4096 "
                             f"that divides block_size={self.block_size}")
        if self.group_size < 1 or self.max_functions < self.group_size:
            raise ValueError("DaemonConfig.max_functions must be >= group_size >= 1")
        if self.capacity < self.block_size:
            raise ValueError(f"DaemonConfig.function_memory_mb={self.function_memory_mb} leaves no room for one block")
        if self.placement not in ("metadata", "daemon"):
            raise ValueError(f"DaemonConfig.placement must be 'metadata' or 'daemon', got {self.placement!r}")
        if self.gc_interval_s and (self.gc_active < 1 or not 0 < self.compact_fraction <= 1
                                   or self.compact_max < 1 or self.degraded_warm_interval_s <= 0):
            raise ValueError("DaemonConfig: gc_active >= 1, 0 < compact_fraction <= 1, compact_max >= 1 and "
                             "degraded_warm_interval_s > 0 when gc_interval_s > 0")
        if self.hello_pending_max < 1:
            raise ValueError(f"DaemonConfig.hello_pending_max must be >= 1, got {self.hello_pending_max}")
        if not 0 < self.hardcap_fraction <= 1:
            raise ValueError(f"DaemonConfig.hardcap_fraction must be in (0, 1], got {self.hardcap_fraction}")
        if self.advertise:
            split_address(self.advertise)
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("DaemonConfig.tls_cert and tls_key go together (--tls-cert PATH --tls-key PATH)")
        if self.tls_cert and not self.tls_ca:
            raise ValueError("DaemonConfig.tls_ca is needed with tls_cert: storage functions verify the daemon "
                             "against it (--tls-ca PATH: ca.pem of `funcsion certs`)")

    def dial_address(self, bound: tuple[str, int]) -> tuple[str, int]:
        """The (host, port) a storage function is told to dial, given the
        address the daemon's listener is ``bound`` to."""
        if not self.advertise:
            return bound[0], int(bound[1])
        host, port = split_address(self.advertise)
        return host, port or int(bound[1])

    @property
    def capacity(self) -> int:
        """Bytes a function may hold in blocks."""
        return (self.function_memory_mb - self.runtime_overhead_mb) * MiB

    @property
    def hardcap(self) -> int:
        return max(self.block_size, int(self.capacity * self.hardcap_fraction) // self.block_size * self.block_size)


def split_address(text: str) -> tuple[str, int]:
    """``"10.0.0.5:7000"`` -> ("10.0.0.5", 7000); ``"10.0.0.5"`` -> ("10.0.0.5", 0);
    ``"[fd00::5]:7000"`` for IPv6. Raises ValueError naming what is wrong."""
    host, sep, port = text.strip(), "", ""
    if host.startswith("["):
        inner, closed, rest = host[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise ValueError(f"address {text!r}: write [IPv6]:PORT, e.g. [fd00::5]:7000")
        host, sep, port = inner, rest[:1], rest[1:]
    elif host.count(":") == 1:
        host, sep, port = host.partition(":")
    if not host or any(c.isspace() or c in "/[]" for c in host) or (sep and not port):
        raise ValueError(f"address {text!r}: write HOST or HOST:PORT, e.g. 10.0.0.5:7000")
    if port and (not port.isdigit() or not 0 < int(port) < 65536):
        raise ValueError(f"address {text!r}: the port must be a number in 1..65535")
    return host, int(port) if port else 0
