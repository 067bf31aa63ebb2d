"""The metadata server (FuncStore Sec. III-A to III-C): a Thrift service holding
workflow registrations, run lifecycle, read counters, commit buffers, the
lifetime-aware allocator, expiry and a journal. Not yet built."""

from __future__ import annotations

__all__: list[str] = []
