"""Typed in-memory model of a workflow description (WDS).

Covers the raw JSON shapes (TypedDicts, as written in FuncStore Fig. 2) and the
validated, template-expanded model (frozen dataclasses) that the rest of
funcsion consumes. Parsing and validation live in ``_parse``; templates in
``_templates``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NotRequired, TypedDict


__all__ = [
    "LambdaSettings",
    "FunctionDoc",
    "StageDoc",
    "WDSDocument",
    "FunctionSpec",
    "Stage",
    "Workflow",
]


@dataclass(frozen=True, slots=True)
class LambdaSettings:
    """What one entry sets; ``None`` (or no layers) where it sets nothing."""

    memory_mb: int | None = None
    timeout_s: int | None = None
    max_attempts: int | None = None
    layers: tuple[str, ...] = ()


class FunctionDoc(TypedDict):
    """One entry of a stage's ``functions`` list, as written in the file."""

    start: bool
    name: str
    input: list[str]
    output: list[str]
    next: list[str]
    replicas: NotRequired[int | str]
    handler: NotRequired[str]
    memory_mb: NotRequired[int]
    timeout_s: NotRequired[int]
    max_attempts: NotRequired[int]
    layers: NotRequired[list[str]]


class StageDoc(TypedDict):
    stage_id: int
    functions: list[FunctionDoc]


class WDSDocument(TypedDict):
    app: str
    workflow_id: int | str
    category: str
    spec: dict[str, StageDoc]
    inputs: NotRequired[list[str]]
    params: NotRequired[dict[str, int]]


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """One (expanded) function of the workflow.

    ``json_path`` points at the entry in the source file that produced it
    (a templated entry produces several functions with the same path);
    ``replica`` is the template index, or ``None`` for a plain entry;
    ``lambda_settings`` is what the entry sets of its Lambda (memory, timeout,
    attempts, layers), shared by every replica.
    """

    name: str
    stage_name: str
    stage_id: int
    start: bool
    input: tuple[str, ...]
    output: tuple[str, ...]
    next: tuple[str, ...]
    json_path: str
    template: str | None = None
    replica: int | None = None
    handler: str | None = None
    lambda_settings: LambdaSettings = field(default_factory=LambdaSettings)

    @property
    def entry(self) -> str:
        """The name of the WDS entry this function came from (its template, or its own name)."""
        return self.template if self.template is not None else self.name

    @property
    def handler_ref(self) -> str:
        """``module:function`` of its code: the ``handler`` key, else ``handlers:<entry base name>``
        where the base name is the entry's name up to its first template brace, trailing ``_`` dropped."""
        if self.handler:
            return self.handler
        base = self.entry.split("{", 1)[0].rstrip("_-") or "handler"
        return f"handlers:{base}"

    @property
    def last_output(self) -> str | None:
        """The write that triggers this function's deferred commit."""
        return self.output[-1] if self.output else None


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    stage_id: int
    functions: tuple[FunctionSpec, ...]


@dataclass(frozen=True, slots=True)
class Workflow:
    """A validated workflow: stages in ``stage_id`` order, templates expanded."""

    app: str
    workflow_id: int | str
    category: str
    stages: tuple[Stage, ...]
    inputs: tuple[str, ...] = ()
    params: dict[str, int] = field(default_factory=dict)
    source: str = "<string>"
    warnings: tuple[str, ...] = ()

    @property
    def functions(self) -> dict[str, FunctionSpec]:
        return {f.name: f for s in self.stages for f in s.functions}

    @property
    def key(self) -> str:
        """A stable registry key: ``app/workflow_id``."""
        return f"{self.app}/{self.workflow_id}"
