"""The local Lambda platform: the embedded default for storage functions and
for workflow task handlers.

``LocalPlatform`` runs each function instance as an OS process that keeps
its memory between invocations, reclaims idle instances, enforces memory
size, timeout and a concurrency limit, injects faults, and bills with AWS
Lambda's public prices. ``PlatformConfig`` (and the ``FUNCSION_*`` variables
in ``ENV``) set it up.
"""

from __future__ import annotations

from ._config import ENV, PlatformConfig
from ._instance import FunctionSpec, InstanceInfo
from ._platform import InvocationHandle, InvocationRecord, LocalPlatform
from ._pricing import (
    PRICE_PER_GB_SECOND_USD, PRICE_PER_REQUEST_USD, PRICING_SOURCE, BillingReport, FunctionBilling, billed_ms,
    gb_seconds,
)
from ._worker import LambdaContext

__all__ = [
    "LocalPlatform", "PlatformConfig", "ENV", "FunctionSpec", "InstanceInfo", "InvocationHandle",
    "InvocationRecord", "BillingReport", "FunctionBilling", "LambdaContext", "billed_ms", "gb_seconds",
    "PRICE_PER_GB_SECOND_USD", "PRICE_PER_REQUEST_USD", "PRICING_SOURCE",
]
