"""``CoreDriver``: drive a ``MetadataState`` by name with a manual clock.

For tests and benchmarks (here and in other packages): no sockets, no journal.
Each call builds the event, stamps it with the driver's clock, applies it and
returns the instructions; ``reply`` picks the caller-facing one.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, TypeVar

from ._events import (AckInstructions, BeginPut, Commit, Delete, EndRun, Event, FinishPut, Get, Instruction, ReadDone,
                      RegisterCapacity, RegisterWorkflow, StartRun, Tick)
from ._state import MetadataState
from ._tokens import token_digest

__all__ = ["CoreDriver", "reply"]

T = TypeVar("T", bound=Instruction)


def reply(instructions: list[Instruction], kind: type[T]) -> T:
    """The first instruction of ``kind`` (the reply to the caller)."""
    for i in instructions:
        if isinstance(i, kind):
            return i
    raise LookupError(f"no {kind.__name__} in {instructions!r}")


class CoreDriver:
    def __init__(self, state: MetadataState | None = None, **state_kwargs: Any) -> None:
        self.state = state or MetadataState(**state_kwargs)
        self.now = 0.0
        self.log: list[Event] = []
        self._rid = itertools.count(1)
        self._tokens = itertools.count(1)

    def apply(self, event: Event) -> list[Instruction]:
        out = self.state.handle(event)
        self.log.append(event)
        return out

    def _ev(self, cls: type[Event], *args: Any, **kw: Any) -> list[Instruction]:
        return self.apply(cls(self.now, f"q{next(self._rid)}", *args, **kw))

    def advance(self, seconds: float) -> None:
        self.now += seconds

    # one method per event
    def register(self, wds_path: str | Path, params: dict[str, int] | None = None) -> str:
        text = Path(wds_path).read_text(encoding="utf-8")
        out = self._ev(RegisterWorkflow, text, dict(params or {}), str(wds_path))
        return out[0].key  # type: ignore[attr-defined, no-any-return]

    def capacity(self, function: str, blocks: int, daemon: str = "") -> list[Instruction]:
        return self._ev(RegisterCapacity, function, blocks, daemon)

    def start(self, key: str, policy: str = "funcstore", ttl_s: float = 3600.0, **hints: Any) -> str:
        """Start a run (the n-th run's token is ``tok-<n>``); ``hints``: max_concurrency,
        capacity_bytes, latency_sensitive."""
        return self.start_out(key, policy, ttl_s, **hints)[0].run_id  # type: ignore[attr-defined, no-any-return]

    def start_out(self, key: str, policy: str = "funcstore", ttl_s: float = 3600.0, **hints: Any
                  ) -> list[Instruction]:
        return self._ev(StartRun, key, token_digest(f"tok-{next(self._tokens)}"), policy, ttl_s, **hints)

    def end(self, run: str, outcome: str = "succeeded") -> list[Instruction]:
        return self._ev(EndRun, run, outcome)

    def begin(self, run: str, fn: str, obj: str, size: int, checksum: str = "", persist: bool = False,
              adhoc: bool = False) -> list[Instruction]:
        return self._ev(BeginPut, run, fn, obj, size, checksum or f"c{size}", persist, adhoc)

    def finish(self, run: str, fn: str, obj: str) -> list[Instruction]:
        return self._ev(FinishPut, run, fn, obj)

    def put(self, run: str, fn: str, obj: str, size: int = 100, checksum: str = "", persist: bool = False,
            adhoc: bool = False) -> list[Instruction]:
        return self.begin(run, fn, obj, size, checksum, persist, adhoc) + self.finish(run, fn, obj)

    def get(self, run: str, fn: str, obj: str, delete: bool = False) -> list[Instruction]:
        return self._ev(Get, run, fn, obj, delete)

    def read_done(self, run: str, fn: str, objects: list[str]) -> list[Instruction]:
        return self._ev(ReadDone, run, fn, list(objects))

    def commit(self, run: str, fn: str) -> list[Instruction]:
        return self._ev(Commit, run, fn)

    def delete(self, run: str, obj: str) -> list[Instruction]:
        return self._ev(Delete, run, obj)

    def tick(self) -> list[Instruction]:
        return self._ev(Tick)

    def ack(self, upto: int, daemon: str = "") -> list[Instruction]:
        return self._ev(AckInstructions, upto, daemon)
