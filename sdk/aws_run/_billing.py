"""The task Lambdas' bill of an AWS run, in the shape the local executor's
platform gives it (``storage_functions.local.BillingReport.to_dict()``, plus
``source``: where the numbers came from, which the cost account repeats).

Each invocation is billed from its Lambda ``REPORT`` line in CloudWatch Logs
when one is found for its request id (``Billed Duration``, ``Memory Size``,
``Max Memory Used``, ``Init Duration``), else from the execution history's
timings (Started to Succeeded/Failed, rounded up to the millisecond) at the
function's configured memory. ``parse_report_line`` is pure; so is
``task_billing``. Fetching the lines and the memory sizes is ``_driver``'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from storage_functions.local import BillingReport, FunctionBilling, billed_ms

from ._history import CLEANUP_TASK, Invocation

__all__ = ["LambdaReport", "parse_report_line", "task_billing", "REPORT_SOURCE", "HISTORY_SOURCE"]

REPORT_SOURCE = "the task Lambdas' REPORT lines in CloudWatch Logs (billed duration, memory size)"
HISTORY_SOURCE = ("the execution history's task timings (Started to Succeeded/Failed, rounded up to 1 ms) at each "
                  "function's configured memory")

_FIELD = re.compile(r"(Request ?Id|Billed Duration|Duration|Memory Size|Max Memory Used|Init Duration):\s*"
                    r"([0-9A-Za-z.-]+)")


@dataclass(frozen=True, slots=True)
class LambdaReport:
    """One ``REPORT RequestId: ...`` line of a Lambda's log."""

    request_id: str
    duration_ms: float
    billed_ms: int
    memory_mb: int
    max_memory_used_mb: float
    init_ms: float | None = None


def parse_report_line(line: str) -> LambdaReport | None:
    """A ``REPORT`` line (tab- or space-separated, as Lambda writes it), or None for any other."""
    if not line.lstrip().startswith("REPORT"):
        return None
    f: dict[str, str] = {}
    for key, value in _FIELD.findall(line):
        f.setdefault(key.replace(" ", "") if key.startswith("Request") else key, value)
    try:
        return LambdaReport(f["RequestId"], float(f["Duration"]), int(float(f["Billed Duration"])),
                            int(float(f["Memory Size"])), float(f.get("Max Memory Used", 0)),
                            float(f["Init Duration"]) if "Init Duration" in f else None)
    except (KeyError, ValueError):
        return None


def task_billing(invocations: Iterable[Invocation], memory_mb: Mapping[str, int],
                 reports: Mapping[str, LambdaReport]) -> dict[str, object]:
    """The bill of the run's task invocations (the cleanup task's included: it is a Lambda of
    the run too). ``memory_mb``: each Lambda's configured memory (0 or absent: unknown);
    ``reports``: REPORT lines by request id."""
    invocations = list(invocations)
    bills: dict[str, FunctionBilling] = {}
    from_logs = from_history = 0
    for inv in invocations:
        if inv.finished_at is None:
            continue
        b = bills.setdefault(inv.lambda_name, FunctionBilling(inv.lambda_name))
        b.invocations += 1
        b.errors += inv.outcome == "error"
        rep = reports.get(inv.request_id or "")
        if rep is not None:
            from_logs += 1
            ms, mem = rep.billed_ms, rep.memory_mb
            b.max_memory_used_mb = max(b.max_memory_used_mb, rep.max_memory_used_mb)
            if rep.init_ms is not None:
                b.cold_starts += 1
                b.init_ms += rep.init_ms
        else:
            from_history += 1
            ms, mem = billed_ms(inv.duration_s or 0.0), int(memory_mb.get(inv.lambda_name, 0))
        b.billed_ms += ms
        b.mb_ms += mem * ms
    doc = BillingReport(bills).to_dict()
    if from_logs and from_history:
        doc["source"] = (f"{REPORT_SOURCE} for {from_logs} invocation(s); {HISTORY_SOURCE} for the "
                         f"{from_history} without one")
    else:
        doc["source"] = REPORT_SOURCE if from_logs else HISTORY_SOURCE
    unknown = sorted({i.lambda_name for i in invocations if not memory_mb.get(i.lambda_name)
                      and i.request_id not in reports and i.task != CLEANUP_TASK})
    if unknown and from_history:
        doc["source"] = f"{doc['source']} (memory unknown for {', '.join(unknown)}: billed at 0 MB)"
    return doc
