"""One typed configuration object for the whole stack.

Precedence, highest first: an explicit argument to ``Config.load(...)``, a
``FUNCSION_<FIELD>`` environment variable, ``funcsion.toml`` (or the
``[tool.funcsion]`` table of ``pyproject.toml``) in the working directory, the
default. Every value is checked at load: a bad one raises ``ConfigError``
naming the field, where the value came from, and what is allowed.
Lower packages never read this: the CLI hands them plain arguments.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from funcsion_errors import FuncsionError
from funcsion_rpc.client import DEFAULT_METADATA_PORT
from storage_functions.protocol import DEFAULT_DAEMON_PORT
from wds import Limits

from ._constants import CONFIG_FILE, ENV_PREFIX

__all__ = ["Config", "ConfigError", "POLICIES"]

_WDS = Limits()  # the defaults of the wds_max_* fields

#: Most chunks per stripe (ec_data + ec_parity): a stripe's chunks go to that many distinct
#: storage functions (one group, each holding a block of it), so the group is the code's width;
#: SION and InfiniCache use 10 + 2. (pyeclib's isa_l_rs_vand refuses more than 256 outright.)
MAX_EC_CHUNKS = 32
POLICIES = ("funcstore", "funcstore:expiry[:<window_ms>]", "funcstore:nogroup", "funcstore[...]:commit", "pocket",
            "oracle", "jiffy:<lease_ms>")
_POLICY = re.compile(r"^(funcstore(:expiry(:[1-9][0-9]*)?|:nogroup|:lifetime)?(:commit)?|pocket|oracle|"
                     r"jiffy:[1-9][0-9]*)$")


_STATE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class ConfigError(FuncsionError):
    """A configuration value is missing or wrong."""


def _check(name: str, value: Any, where: str) -> None:
    def bad(rule: str) -> ConfigError:
        return ConfigError(f"config field {name!r} = {value!r} (from {where}) is invalid: {rule}")

    if name.endswith("_port") and not 0 <= value <= 65535:
        raise bad("a port is 0..65535 (0 picks a free one)")
    if name == "policy" and not _POLICY.match(value):
        raise bad("use funcstore (or funcstore:expiry[:<window_ms>], funcstore:nogroup, each with :commit to "
                  "keep memory until the last commit), pocket, oracle or jiffy:<lease_ms>, e.g. jiffy:5000")
    if name in ("block_size", "ec_data", "max_object_size", "memory_budget_mb", "storage_functions",
                "function_memory_mb", "task_memory_mb", "max_attempts", "task_timeout_s") and value < 1:
        raise bad("must be at least 1")
    if name == "offload_threshold_bytes" and not 1024 <= value <= 200 * 1024:
        raise bad("use 1024 to 204800 bytes: a result must leave room in the 256 KiB Step Functions state")
    if name.startswith("wds_max_") and value < 1:
        raise bad("must be at least 1")
    if name in ("ec_parity", "kill_rate", "kill_storage_rate", "restart_daemon_after_s", "crash_rate", "run_ttl_s",
                "persist_ttl_s", "metadata_failover_s", "daemon_failover_s",
                "idle_reclaim_min_s", "idle_reclaim_max_s", "task_concurrency", "retrain_every") and value < 0:
        raise bad("must not be negative")
    if name in ("kill_rate", "kill_storage_rate", "crash_rate") and value > 1:
        raise bad("is a probability between 0 and 1")
    if name.endswith("_state_id") and not _STATE_ID.match(value):
        raise bad("a state id is 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit, "
                  "e.g. metadata-1; give each server of a deployment its own")
    if name == "control_ship_lag_s" and not value >= 0:
        raise bad("must be 0 (ship before replying) or more seconds (the longest a host loss may lose; "
                  "default 1)")


def _check_code(d: int, p: int, sources: Mapping[str, str]) -> None:
    """ec_data/ec_parity within what the Reed-Solomon code and a function group can hold."""
    where = f"ec_data = {d} (from {sources.get('ec_data', 'default')}), ec_parity = {p} " \
            f"(from {sources.get('ec_parity', 'default')})"
    if d + p > MAX_EC_CHUNKS:
        raise ConfigError(
            f"config fields {where}: {d + p} chunks per stripe is over the limit of {MAX_EC_CHUNKS}: each chunk "
            f"goes to its own storage function of one group, so every coded object would take {d + p} functions "
            f"and a block on each (pyeclib's ISA-L code refuses over 256 outright); use e.g. 10 + 2, as SION does")
    # ISA-L's gf_gen_rs_matrix (pyeclib's isa_l_rs_vand) documents its Vandermonde code as MDS
    # only for p <= 3, and p = 4 with d <= 21; measured: 10 of the 3,003 ways to lose 5 of 10 + 5
    # chunks, and 2 of the first 4,001 of 22 + 4, leave chunks that do not decode
    if p > 4 or (p == 4 and d > 21):
        raise ConfigError(
            f"config fields {where}: pyeclib's isa_l_rs_vand code (ISA-L's Vandermonde matrix) cannot rebuild "
            f"some sets of {d} surviving chunks out of {d + p}, so an object could be lost with fewer than {p} "
            "chunks gone; use ec_parity <= 3 (or 4 with ec_data <= 21)")


@dataclass(frozen=True)
class Config:
    """Every setting of a funcsion stack (see docs/configuration.md)."""

    # servers
    host: str = "127.0.0.1"
    metadata_port: int = DEFAULT_METADATA_PORT  # 7917, every command's default
    daemon_port: int = DEFAULT_DAEMON_PORT  # 7918
    state_dir: str = ".funcsion"
    cos_url: str = ""  # default: file://<state_dir>/cos
    # TLS (``funcsion serve metadata|daemon``; ``funcsion certs`` makes them): the server's
    # certificate chain and key, and the CA the deployment's clients trust (PEM files; "": none)
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    # control state in COS (issue 31): each server's stable identity, under which its journal
    # (metadata) or durable table (daemon) is shipped to <cos_url>/control/<kind>/<state id>/ and
    # restored from by a replacement with an empty state directory; and the shipping window: a
    # host loss loses at most what was journaled in the last control_ship_lag_s (plus one upload);
    # 0 ships synchronously: nothing answered is lost, each server round (daemon: each table
    # record) waits one COS PUT
    metadata_state_id: str = "metadata-0"
    daemon_state_id: str = "daemon-0"
    control_ship_lag_s: float = 1.0
    # losing one of several hosts mid-run: how long every SDK call (tasks and drivers) waits for
    # an unreachable metadata shard (metadata_failover_s) or daemon (daemon_failover_s) to be
    # replaced before it fails, naming the setting; long enough for a replacement process to
    # start and restore its control state from COS. The wait ends at once when no server of the
    # deployment answers (the whole stack is gone)
    metadata_failover_s: float = 120.0
    daemon_failover_s: float = 120.0
    # storage
    block_size: int = 1 << 20
    memory_grain: int = 4096  # storage functions back blocks by this grain, a page (0: whole blocks)
    ec_data: int = 10
    ec_parity: int = 2
    max_object_size: int = 1 << 30
    memory_budget_mb: int = 4096
    storage_functions: int = 12
    function_memory_mb: int = 1024
    idle_reclaim_min_s: float = 300.0
    idle_reclaim_max_s: float = 600.0
    # runs
    policy: str = "funcstore"
    run_ttl_s: float = 3600.0
    # a persisted copy's lifetime after its run ends (put(..., persist=True); 0: until deleted)
    persist_ttl_s: float = 0.0
    # lifetime prediction: datasets recorded from runs, trained models, automatic retraining
    lifetime_data: str = ""  # default: <state_dir>/lifetimes
    lifetime_models: str = ""  # default: <state_dir>/models (then the models shipped with funcsion)
    retrain_every: int = 0  # retrain a category after every N recorded runs (0: never; needs torch)
    # tasks
    task_memory_mb: int = 512
    task_timeout_s: float = 300.0
    task_concurrency: int = 0  # 0: one per core
    max_attempts: int = 3
    # @sdk.offload: a task result, or any value inside it, whose JSON is larger than this is stored
    # in funcsion and replaced by a reference; the default leaves a Step Functions state (256 KiB,
    # for the whole state) room for several such results and the rest of its input
    offload_threshold_bytes: int = 64 * 1024
    # fault injection
    kill_rate: float = 0.0
    kill_storage_rate: float = 0.0  # SIGKILL storage-function instances (the embedded stack's)
    restart_daemon_after_s: float = 0.0  # kill -9 the embedded stack's daemon this long into a run, restart it
    crash_rate: float = 0.0
    # workflow descriptions: how large one may be and expand to (wds.Limits; docs/workflow.md, "Validation")
    wds_max_bytes: int = _WDS.max_bytes
    wds_max_depth: int = _WDS.max_depth
    wds_max_functions: int = _WDS.max_functions
    wds_max_objects: int = _WDS.max_objects
    wds_max_edges: int = _WDS.max_edges
    wds_max_range: int = _WDS.max_range
    wds_max_format_width: int = _WDS.max_format_width
    # aws
    region: str = "us-east-1"
    role_arn: str = ""
    s3_endpoint_url: str = ""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def resolved_cos_url(self) -> str:
        return self.cos_url or (Path(self.state_dir).resolve() / "cos").as_uri()

    @property
    def resolved_lifetime_data(self) -> Path:
        return Path(self.lifetime_data) if self.lifetime_data else Path(self.state_dir).resolve() / "lifetimes"

    @property
    def resolved_lifetime_models(self) -> Path:
        return Path(self.lifetime_models) if self.lifetime_models else Path(self.state_dir).resolve() / "models"

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name != "sources"]

    @classmethod
    def load(cls, *, cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
             **explicit: Any) -> Config:
        """Merge the four sources; raise ``ConfigError`` on the first bad value."""
        env = os.environ if env is None else env
        types = {f.name: f.type for f in fields(cls)}
        known = set(cls.field_names())
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        file_values, file_name = _read_file(Path(cwd or "."))
        for name, value in file_values.items():
            if name not in known:
                raise ConfigError(f"{file_name}: unknown config field {name!r}; known: {', '.join(sorted(known))}")
            values[name], sources[name] = _coerce(name, value, types[name], file_name), file_name
        for name in known:
            var = ENV_PREFIX + name.upper()
            if var in env:
                values[name], sources[name] = _coerce(name, env[var], types[name], f"${var}"), f"${var}"
        for name, value in explicit.items():
            if name not in known:
                raise ConfigError(f"unknown config field {name!r}; known: {', '.join(sorted(known))}")
            if value is not None:
                values[name], sources[name] = _coerce(name, value, types[name], "argument"), "argument"
        cfg = cls(**values, sources=sources)
        for name in known:
            _check(name, getattr(cfg, name), sources.get(name, "default"))
        grain = cfg.memory_grain
        if grain < 0 or (0 < grain < cfg.block_size and (grain % 4096 or cfg.block_size % grain)):
            raise ConfigError(f"config field 'memory_grain' = {grain} (from {sources.get('memory_grain', 'default')}) "
                              f"is invalid: use 0 (whole blocks) or a multiple of 4096 that divides block_size "
                              f"({cfg.block_size}), e.g. 4096")
        _check_code(cfg.ec_data, cfg.ec_parity, sources)
        if cfg.idle_reclaim_max_s < cfg.idle_reclaim_min_s:
            raise ConfigError("config fields idle_reclaim_min_s/idle_reclaim_max_s: the max is below the min")
        return cfg

    def wds_limits(self) -> Limits:
        """The ``wds_max_*`` fields as the ``wds.Limits`` every command that reads a WDS applies."""
        return Limits(**{f.name: getattr(self, Limits.setting(f.name)) for f in fields(Limits)})

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


def _read_file(cwd: Path) -> tuple[dict[str, Any], str]:
    own = cwd / CONFIG_FILE
    try:
        if own.is_file():
            return tomllib.loads(own.read_text(encoding="utf-8")), str(own)
        py = cwd / "pyproject.toml"
        if py.is_file():
            table = tomllib.loads(py.read_text(encoding="utf-8")).get("tool", {}).get("funcsion", {})
            return dict(table), f"{py} [tool.funcsion]"
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{own if own.is_file() else cwd / 'pyproject.toml'}: not valid TOML: {exc}") from None
    return {}, ""


def _coerce(name: str, value: Any, typ: Any, where: str) -> Any:
    kind = {"int": int, "float": float, "str": str}.get(typ if isinstance(typ, str) else typ.__name__)
    try:
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is str:
            if not isinstance(value, str):
                raise ValueError
            return value
    except (TypeError, ValueError):
        pass
    else:
        return value
    raise ConfigError(f"config field {name!r} = {value!r} (from {where}) is not a valid "
                      f"{getattr(kind, '__name__', typ)}")
