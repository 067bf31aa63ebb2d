"""AWS's public prices, in one dated table: Lambda (task and storage functions),
S3 Standard (COS requests and storage) and ElastiCache on-demand nodes (the
always-on baseline). Every cost figure funcsion prints comes from here: the
local platform's billing meter (``storage_functions.local._pricing``), the
run's cost account (``storage_functions.cost``) and the benchmarks.

All prices: US East (N. Virginia), on-demand, first pricing tier, free tier
ignored, as listed on the pages in ``PRICE_SOURCES`` on ``PRICES_AS_OF``.
Pure data; nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "PRICES_AS_OF", "PRICE_SOURCES", "LAMBDA_GB_SECOND_USD", "LAMBDA_REQUEST_USD", "LAMBDA_GRANULARITY_MS",
    "S3_PUT_USD", "S3_GET_USD", "S3_GB_MONTH_USD", "HOURS_PER_MONTH", "CacheNode", "ELASTICACHE_NODES",
    "ELASTICACHE_RESERVED_MEMORY", "price_table",
]

#: the day these prices were read off the pages below
PRICES_AS_OF = "2025-06-01"
PRICE_SOURCES = {
    "lambda": "https://aws.amazon.com/lambda/pricing/ (x86, us-east-1, first tier)",
    "s3": "https://aws.amazon.com/s3/pricing/ (S3 Standard, us-east-1, first 50 TB)",
    "elasticache": "https://aws.amazon.com/elasticache/pricing/ (on-demand nodes, Redis OSS, us-east-1)",
}

#: Lambda: per GB-second of billed duration, per request; duration billed in 1 ms steps (Dec 2020)
LAMBDA_GB_SECOND_USD = 0.0000166667
LAMBDA_REQUEST_USD = 0.20 / 1_000_000
LAMBDA_GRANULARITY_MS = 1

#: S3 Standard: PUT, COPY, POST, LIST per request; GET, SELECT per request; storage per GB-month.
#: DELETE is free.
S3_PUT_USD = 0.005 / 1000
S3_GET_USD = 0.0004 / 1000
S3_GB_MONTH_USD = 0.023
#: what AWS counts as a month when it prorates GB-months by the hour
HOURS_PER_MONTH = 730


@dataclass(frozen=True, slots=True)
class CacheNode:
    """One ElastiCache node type: its memory (GiB, as AWS lists it) and on-demand price per hour."""

    name: str
    memory_gib: float
    usd_per_hour: float


#: ElastiCache on-demand node types (cheapest first within each family), us-east-1
ELASTICACHE_NODES = (
    CacheNode("cache.t4g.micro", 0.5, 0.016),
    CacheNode("cache.t4g.small", 1.37, 0.032),
    CacheNode("cache.t4g.medium", 3.09, 0.065),
    CacheNode("cache.m6g.large", 6.38, 0.149),
    CacheNode("cache.r6g.large", 13.07, 0.206),
    CacheNode("cache.r6g.xlarge", 26.32, 0.411),
    CacheNode("cache.r6g.2xlarge", 52.82, 0.821),
    CacheNode("cache.r6g.4xlarge", 105.81, 1.642),
)
#: ElastiCache's default ``reserved-memory-percent``: a quarter of a node's memory holds no data
ELASTICACHE_RESERVED_MEMORY = 0.25


def price_table() -> dict[str, object]:
    """The table as the reports print it (JSON-ready)."""
    return {
        "as_of": PRICES_AS_OF, "sources": dict(PRICE_SOURCES),
        "lambda_gb_second_usd": LAMBDA_GB_SECOND_USD, "lambda_request_usd": LAMBDA_REQUEST_USD,
        "lambda_granularity_ms": LAMBDA_GRANULARITY_MS,
        "s3_put_usd": S3_PUT_USD, "s3_get_usd": S3_GET_USD, "s3_gb_month_usd": S3_GB_MONTH_USD,
        "elasticache_nodes": {n.name: {"memory_gib": n.memory_gib, "usd_per_hour": n.usd_per_hour}
                              for n in ELASTICACHE_NODES},
        "elasticache_reserved_memory": ELASTICACHE_RESERVED_MEMORY,
    }
