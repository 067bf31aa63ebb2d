"""The heterogeneous DAG (FuncStore Sec. III-B1, Fig. 6) built on networkx.

Nodes (tuples, first element the kind):

- ``("function", name)``: a task function, with its ``stage``;
- ``("pipe", producer)``: the objects one function writes (``producer`` is
  ``None`` for the workflow's inputs, uploaded by the client);
- ``("send", object)``: one SendBox per object in a pipe;
- ``("recv", producer, reader)``: one RecvBox per function reading from a pipe.

Edges: function -> its pipe (``writes``); pipe -> its boxes (``holds``);
SendBox -> RecvBox (``flow``, one per (object, reader) pair); RecvBox ->
reading function (``delivers``). The read count of an object is the number of
``flow`` edges leaving its SendBox, which is what tells broadcast (one object,
many RecvBoxes) from scatter (many objects, one RecvBox each) where a
function-level DAG cannot.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import networkx as nx

from wds import Workflow

from ._features import Features, extract_features

__all__ = ["HDAG", "feature_inputs", "ObjectInfo", "FunctionInfo", "PipeInfo", "Pattern", "build"]

Pattern = Literal["pass", "broadcast", "scatter", "aggregate", "output"]


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    name: str
    producer: str | None
    readers: tuple[str, ...]
    pattern: tuple[Pattern, ...]
    features: Features | None

    @property
    def read_count(self) -> int:
        """T_read: how many declared readers must commit before the object expires."""
        return len(self.readers)

    @property
    def is_input(self) -> bool:
        return self.producer is None

    @property
    def is_output(self) -> bool:
        """A workflow output: written, never read inside the workflow (read count 0)."""
        return self.producer is not None and not self.readers

    def to_dict(self) -> dict[str, Any]:
        return {
            "producer": self.producer,
            "readers": list(self.readers),
            "read_count": self.read_count,
            "pattern": self.pattern[0] if len(self.pattern) == 1 else list(self.pattern),
            "features": self.features.to_dict() if self.features else None,
        }


@dataclass(frozen=True, slots=True)
class FunctionInfo:
    name: str
    stage: int
    stage_name: str
    start: bool
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    next: tuple[str, ...]
    template: str | None
    replica: int | None
    handler: str

    @property
    def last_output(self) -> str | None:
        """The write that triggers the deferred commit, or None (commit explicitly)."""
        return self.outputs[-1] if self.outputs else None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"stage": self.stage, "stage_name": self.stage_name, "start": self.start,
                             "inputs": list(self.inputs), "outputs": list(self.outputs),
                             "next": list(self.next), "last_output": self.last_output,
                             "handler": self.handler}
        if self.template is not None:
            d["template"] = self.template
            d["replica"] = self.replica
        return d


@dataclass(frozen=True, slots=True)
class PipeInfo:
    producer: str | None
    objects: tuple[str, ...]
    readers: tuple[str, ...]
    pattern: tuple[Pattern, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"producer": self.producer, "objects": list(self.objects), "readers": list(self.readers),
                "pattern": list(self.pattern)}


def feature_inputs(workflow: Workflow) -> dict[str, Any]:
    """The tables ``extract_features`` takes (producer, readers, stage, n_inputs, parents,
    position), derived once from a workflow's functions."""
    specs = workflow.functions
    producer: dict[str, str | None] = {o: None for o in workflow.inputs}
    for f in specs.values():
        for o in f.output:
            producer[o] = f.name
    readers: dict[str, list[str]] = {o: [] for o in producer}
    for f in specs.values():
        for o in f.input:
            readers[o].append(f.name)
    return {
        "producer": producer,
        "readers": {o: tuple(r) for o, r in readers.items()},
        "stage": {f.name: f.stage_id for f in specs.values()},
        "n_inputs": {n: len(f.input) for n, f in specs.items()},
        "parents": {f.name: frozenset(p for o in f.input if (p := producer[o]) is not None)
                    for f in specs.values()},
        "position": {f.name: i for s in workflow.stages for i, f in enumerate(s.functions)},
    }


class HDAG:
    """A workflow as an HDAG, with everything the runtime asks of it precomputed."""

    def __init__(self, workflow: Workflow) -> None:
        self.workflow = workflow
        specs = workflow.functions
        fi = self._feature_inputs = feature_inputs(workflow)
        self._features_at: dict[int, dict[str, Features]] = {}
        producer, readers = fi["producer"], fi["readers"]
        self.functions: dict[str, FunctionInfo] = {
            f.name: FunctionInfo(f.name, f.stage_id, f.stage_name, f.start, f.input, f.output, f.next,
                                 f.template, f.replica, f.handler_ref)
            for f in specs.values()
        }
        features = extract_features(**fi)
        # Pipe-level facts for the patterns.
        pipe_objects: dict[str | None, list[str]] = {}
        for o, p in producer.items():
            pipe_objects.setdefault(p, []).append(o)
        pipe_readers = {p: tuple(dict.fromkeys(r for o in objs for r in readers[o]))
                        for p, objs in pipe_objects.items()}
        aggregating = {f.name for f in specs.values()
                       if len({producer[o] for o in f.input}) > 1}
        self.objects: dict[str, ObjectInfo] = {}
        for o, p in producer.items():
            rs = tuple(readers[o])
            pats: list[Pattern] = []
            if not rs:
                pats.append("output")
            elif len(rs) > 1:
                pats.append("broadcast")
            elif len(pipe_readers[p]) > 1:
                pats.append("scatter")
            else:
                pats.append("pass")
            if any(r in aggregating for r in rs):
                pats.append("aggregate")
            self.objects[o] = ObjectInfo(o, p, rs, tuple(pats), features.get(o))
        self.pipes: dict[str | None, PipeInfo] = {
            p: PipeInfo(p, tuple(objs), pipe_readers[p],
                        tuple(dict.fromkeys(pt for o in objs for pt in self.objects[o].pattern)))
            for p, objs in pipe_objects.items()
        }

    # -- the networkx graph (built on first use: the runtime needs only the tables) --
    @functools.cached_property
    def graph(self) -> nx.DiGraph:
        """The HDAG as a networkx DiGraph (node kinds in the module docstring)."""
        g = nx.DiGraph(app=self.workflow.app, workflow_id=self.workflow.workflow_id)
        for f in self.functions.values():
            g.add_node(("function", f.name), kind="function", stage=f.stage, start=f.start)
        for p, pipe in self.pipes.items():
            pn = ("pipe", p)
            g.add_node(pn, kind="pipe", producer=p)
            if p is not None:
                g.add_edge(("function", p), pn, kind="writes")
            for r in pipe.readers:
                g.add_node(("recv", p, r), kind="recv")
                g.add_edge(pn, ("recv", p, r), kind="holds")
                g.add_edge(("recv", p, r), ("function", r), kind="delivers")
            for o in pipe.objects:
                info = self.objects[o]
                g.add_node(("send", o), kind="send", object=o, read_count=info.read_count)
                g.add_edge(pn, ("send", o), kind="holds")
                for r in info.readers:
                    g.add_edge(("send", o), ("recv", p, r), kind="flow", object=o)
        return g

    # -- queries --------------------------------------------------------------------
    def features_at(self, concurrency: int) -> dict[str, Features]:
        """Every object's features for a run of ``concurrency`` tasks at once (the wave
        features depend on it; 0: unknown, as ``ObjectInfo.features``). Cached."""
        c = max(concurrency, 0)
        hit = self._features_at.get(c)
        if hit is None:
            if len(self._features_at) >= 64:
                self._features_at.clear()
            hit = self._features_at[c] = extract_features(**self._feature_inputs, concurrency=c)
        return hit

    @property
    def key(self) -> str:
        return self.workflow.key

    @property
    def width(self) -> int:
        """The functions of the widest stage: the workflow's fan-out (at least 1)."""
        return max((len(s.functions) for s in self.workflow.stages), default=1) or 1

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(o for o, i in self.objects.items() if i.is_input)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(o for o, i in self.objects.items() if i.is_output)

    @property
    def intermediates(self) -> tuple[str, ...]:
        return tuple(o for o, i in self.objects.items() if i.producer is not None and i.readers)

    def read_count(self, obj: str) -> int:
        return self.objects[obj].read_count

    def stages(self) -> list[tuple[int, str, list[str]]]:
        """(stage_id, stage name, function names) in stage order."""
        return [(s.stage_id, s.name, [f.name for f in s.functions]) for s in self.workflow.stages]

    def function_graph(self) -> nx.DiGraph:
        """Functions only, with an edge wherever one must finish before another starts
        (data flow and ``next``): the execution order for executors and ASL."""
        g = nx.DiGraph()
        g.add_nodes_from(self.functions)
        for info in self.objects.values():
            if info.producer is not None:
                g.add_edges_from((info.producer, r) for r in info.readers)
        for f in self.functions.values():
            g.add_edges_from((f.name, n) for n in f.next)
        return g

    def recv_boxes(self, obj: str) -> Iterator[tuple[str, ...]]:
        """The RecvBox nodes fed by an object's SendBox."""
        return (n for n in self.graph.successors(("send", obj)))

    def to_dict(self) -> dict[str, Any]:
        """The document ``funcsion inspect --json`` prints (see docs/workflow.md, "Inspecting a workflow")."""
        wf = self.workflow
        return {
            "workflow": {
                "app": wf.app, "workflow_id": wf.workflow_id, "category": wf.category,
                "source": wf.source, "params": dict(wf.params),
                "stages": [{"stage_id": sid, "name": name, "functions": fs} for sid, name, fs in self.stages()],
                "inputs": list(self.inputs), "outputs": list(self.outputs),
                "counts": {"functions": len(self.functions), "objects": len(self.objects),
                           "intermediates": len(self.intermediates), "pipes": len(self.pipes)},
                "warnings": list(wf.warnings),
            },
            "objects": {o: i.to_dict() for o, i in self.objects.items()},
            "functions": {n: f.to_dict() for n, f in self.functions.items()},
            "pipes": {("$inputs" if p is None else p): pi.to_dict() for p, pi in self.pipes.items()},
        }


def build(workflow: Workflow) -> HDAG:
    """Build the HDAG of a validated workflow."""
    return HDAG(workflow)
