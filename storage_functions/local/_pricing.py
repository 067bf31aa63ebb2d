"""The billing meter: AWS Lambda's public prices applied to local invocations.

Prices: AWS Lambda's, from the one dated table in ``storage_functions.pricing``
(x86, US East, first tier, free tier ignored). Duration is billed
in 1 ms increments (since Dec 2020), at least 1 ms per invocation; GB-seconds
are ``memory_mb / 1024 * billed_seconds``. Since Aug 2025 AWS bills the INIT
phase of on-demand functions too (``PlatformConfig.bill_init``).

Pure: ``billed_ms``, ``gb_seconds`` and ``cost_usd`` are functions of
numbers; ``BillingMeter`` only accumulates what the platform measured.
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, field

from ..pricing import LAMBDA_GB_SECOND_USD, LAMBDA_GRANULARITY_MS, LAMBDA_REQUEST_USD, PRICE_SOURCES, PRICES_AS_OF

__all__ = [
    "PRICE_PER_GB_SECOND_USD", "PRICE_PER_REQUEST_USD", "PRICING_SOURCE", "BILLING_GRANULARITY_MS",
    "billed_ms", "gb_seconds", "cost_usd", "FunctionBilling", "BillingReport", "BillingMeter",
]

PRICING_SOURCE = f"{PRICE_SOURCES['lambda']}, as of {PRICES_AS_OF}"
PRICE_PER_GB_SECOND_USD = LAMBDA_GB_SECOND_USD
PRICE_PER_REQUEST_USD = LAMBDA_REQUEST_USD
BILLING_GRANULARITY_MS = LAMBDA_GRANULARITY_MS


def billed_ms(duration_s: float) -> int:
    """Billed milliseconds of a run of ``duration_s`` seconds: rounded up to
    the next whole millisecond, at least 1."""
    if duration_s < 0:
        raise ValueError(f"duration must be >= 0 s, got {duration_s!r}")
    ms = math.ceil(round(duration_s * 1000.0, 6) / BILLING_GRANULARITY_MS) * BILLING_GRANULARITY_MS
    return max(BILLING_GRANULARITY_MS, ms)


def gb_seconds(memory_mb: int, billed: int) -> float:
    """GB-seconds of ``billed`` milliseconds at ``memory_mb`` (1 GB = 1024 MB)."""
    return memory_mb / 1024.0 * billed / 1000.0


def cost_usd(requests: int, gb_s: float) -> float:
    return requests * PRICE_PER_REQUEST_USD + gb_s * PRICE_PER_GB_SECOND_USD


@dataclass(slots=True)
class FunctionBilling:
    """What one function was billed. ``mb_ms`` sums memory_mb x billed ms
    exactly (memory may change with a redeploy); ``errors`` counts
    invocations that did not return a result (billed all the same)."""

    function_name: str
    invocations: int = 0
    cold_starts: int = 0
    errors: int = 0
    billed_ms: int = 0
    init_ms: float = 0.0
    mb_ms: int = 0
    max_memory_used_mb: float = 0.0

    @property
    def gb_seconds(self) -> float:
        return self.mb_ms / 1024.0 / 1000.0

    @property
    def cost_usd(self) -> float:
        return cost_usd(self.invocations, self.gb_seconds)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["gb_seconds"] = self.gb_seconds
        d["cost_usd"] = self.cost_usd
        return d


@dataclass(slots=True)
class BillingReport:
    """Per-function bills and their totals."""

    functions: dict[str, FunctionBilling] = field(default_factory=dict)

    @property
    def invocations(self) -> int:
        return sum(f.invocations for f in self.functions.values())

    @property
    def gb_seconds(self) -> float:
        return sum(f.gb_seconds for f in self.functions.values())

    @property
    def cost_usd(self) -> float:
        return sum(f.cost_usd for f in self.functions.values())

    def to_dict(self) -> dict[str, object]:
        return {
            "functions": {n: f.to_dict() for n, f in sorted(self.functions.items())},
            "invocations": self.invocations, "gb_seconds": self.gb_seconds, "cost_usd": self.cost_usd,
            "pricing": {"per_gb_second_usd": PRICE_PER_GB_SECOND_USD, "per_request_usd": PRICE_PER_REQUEST_USD,
                        "granularity_ms": BILLING_GRANULARITY_MS, "source": PRICING_SOURCE},
        }

    def format_text(self) -> str:
        rows = [f"{'function':<28} {'invocations':>11} {'cold':>5} {'errors':>6} {'GB-s':>12} {'USD':>12}"]
        for name, f in sorted(self.functions.items()):
            rows.append(f"{name:<28} {f.invocations:>11} {f.cold_starts:>5} {f.errors:>6} "
                        f"{f.gb_seconds:>12.4f} {f.cost_usd:>12.8f}")
        rows.append(f"{'total':<28} {self.invocations:>11} {'':>5} {'':>6} {self.gb_seconds:>12.4f} {self.cost_usd:>12.8f}")
        return "\n".join(rows) + f"\nprices: {PRICING_SOURCE}\n"


class BillingMeter:
    """Thread-safe accumulator of invocation bills."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bills: dict[str, FunctionBilling] = {}

    def record(self, function_name: str, memory_mb: int, duration_s: float, *, init_s: float = 0.0,
               cold: bool = False, error: bool = False, bill_init: bool = True,
               max_memory_used_mb: float = 0.0) -> int:
        """Bill one invocation; return its billed milliseconds."""
        ms = billed_ms(duration_s + (init_s if bill_init else 0.0))
        with self._lock:
            b = self._bills.setdefault(function_name, FunctionBilling(function_name))
            b.invocations += 1
            b.cold_starts += int(cold)
            b.errors += int(error)
            b.billed_ms += ms
            b.init_ms += init_s * 1000.0
            b.mb_ms += memory_mb * ms
            b.max_memory_used_mb = max(b.max_memory_used_mb, max_memory_used_mb)
        return ms

    def report(self) -> BillingReport:
        with self._lock:
            return BillingReport({n: FunctionBilling(**asdict(b)) for n, b in self._bills.items()})
