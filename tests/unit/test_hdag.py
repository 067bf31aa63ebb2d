"""HDAG structure, read counts, transfer patterns, lifetime features (Fig. 9)."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

import hdag
import wds

from .test_wds_validation import doc, fn


def build(d: dict) -> hdag.HDAG:
    return hdag.build(wds.loads(json.dumps(d)))


BROADCAST = doc(("s1", 1, [fn("src", ["in"], ["x"], ["a", "b", "c"], start=True)]),
                ("s2", 2, [fn("a", ["x"], ["ra"], []), fn("b", ["x"], ["rb"], []), fn("c", ["x"], ["rc"], [])]))
SCATTER = doc(("s1", 1, [fn("src", ["in"], ["x0", "x1", "x2"], ["a", "b", "c"], start=True)]),
              ("s2", 2, [fn("a", ["x0"], ["ra"], []), fn("b", ["x1"], ["rb"], []), fn("c", ["x2"], ["rc"], [])]))


def test_broadcast_and_scatter_differ_though_their_function_dags_are_equal() -> None:
    b, s = build(BROADCAST), build(SCATTER)
    assert nx.utils.graphs_equal(b.function_graph(), s.function_graph())
    assert b.objects["x"].read_count == 3 and b.objects["x"].pattern == ("broadcast",)
    assert [s.objects[f"x{k}"].read_count for k in range(3)] == [1, 1, 1]
    assert all(s.objects[f"x{k}"].pattern == ("scatter",) for k in range(3))
    # In the HDAG: one SendBox with three flows vs three SendBoxes with one each.
    assert len(list(b.recv_boxes("x"))) == 3
    assert [len(list(s.recv_boxes(f"x{k}"))) for k in range(3)] == [1, 1, 1]


def test_pass_aggregate_output_and_input() -> None:
    d = doc(("s1", 1, [fn("f", ["in"], ["x"], ["g"], start=True), fn("h", ["in2"], ["y"], ["g"], start=True)]),
            ("s2", 2, [fn("g", ["x", "y"], ["out"], [])]))
    h = build(d)
    assert h.objects["x"].pattern == ("pass", "aggregate")
    assert h.objects["out"].pattern == ("output",) and h.objects["out"].is_output
    assert h.objects["in"].is_input and h.objects["in"].producer is None
    assert h.pipes["f"].pattern == ("pass", "aggregate")
    assert set(h.inputs) == {"in", "in2"} and h.outputs == ("out",)


def test_pipe_nodes_hold_sendboxes_and_recvboxes() -> None:
    h = build(BROADCAST)
    g = h.graph
    pipe = ("pipe", "src")
    assert g.nodes[pipe]["kind"] == "pipe"
    assert ("function", "src") in g.predecessors(pipe)
    held = {n[0] for n in g.successors(pipe)}
    assert held == {"send", "recv"}
    flows = [(u, v) for u, v, k in g.edges(data="kind") if k == "flow" and v[1] == "src"]
    assert len(flows) == 3 and all(u == ("send", "x") for u, _ in flows)
    assert (("send", "in"), ("recv", None, "src")) in g.edges  # the inputs' pipe has no producer
    assert all(g.nodes[n]["kind"] in {"function", "pipe", "send", "recv"} for n in g)
    assert nx.is_directed_acyclic_graph(g)


def test_last_output_and_stage() -> None:
    h = build(SCATTER)
    assert h.functions["src"].last_output == "x2"
    assert h.functions["a"].stage == 2
    d = doc(("s1", 1, [fn("only", ["in"], [], [], start=True)]))
    assert build(d).functions["only"].last_output is None


def test_fig9_features(fig9_path: Path) -> None:
    h = hdag.build(wds.load(fig9_path))
    f = h.objects["a"].features
    assert f is not None
    assert f.vector()[:5] == (3, 2, 4, 2, 4)
    assert set(f.to_dict()) == set(hdag.NAMES) and f.to_dict()["M_path"] == 4
    assert h.functions["F1"].stage == 3  # F_stage is the writer's stage_id, M = 3 in the file


def test_features_of_simple_chains() -> None:
    d = doc(("s1", 1, [fn("a", ["in"], ["x"], ["b"], start=True)]),
            ("s2", 2, [fn("b", ["x"], ["y"], ["c"])]),
            ("s3", 3, [fn("c", ["y", "x"], ["z"], [])]))
    h = build(d)
    fx = h.objects["x"].features
    assert fx is not None and fx.to_dict() == {"F_stage": 1, "T_read": 2, "N_functions": 3, "D_stage": 2, "M_path": 3,
                                               "W_write": 0.0, "W_read": 0.0}
    assert h.objects["z"].features is None and h.objects["in"].features is None


def test_wave_features_place_writer_and_last_reader_in_waves_of_the_runs_concurrency() -> None:
    """Five mappers and two reducers: with 2 tasks at once mapper k runs in wave k // 2 (the
    fraction is its slot); unknown concurrency counts the widest stage (5) as one wave."""
    d = doc(("s1", 1, [fn(f"m{k}", [f"in{k}"], [f"x{k}_0", f"x{k}_1"], ["r0", "r1"], start=True) for k in range(5)]),
            ("s2", 2, [fn(f"r{j}", [f"x{k}_{j}" for k in range(5)], [f"out{j}"], []) for j in range(2)]))
    h = build(d)
    at2 = h.features_at(2)
    assert [at2[f"x{k}_0"].W_write for k in range(5)] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert [at2[f"x3_{j}"].W_read for j in range(2)] == [0.0, 0.5]
    assert [h.objects[f"x{k}_1"].features.W_write for k in range(5)] == [0.0, 0.2, 0.4, 0.6, 0.8]  # type: ignore[union-attr]
    assert h.features_at(0) == {o: i.features for o, i in h.objects.items() if i.features is not None}
    assert h.features_at(1)["x4_1"].vector() == (1, 1, 5, 1, 2, 4.0, 1.0)
    assert h.features_at(2) is at2                                  # cached per concurrency
    # the five FuncStore features do not depend on it
    assert all(f.vector()[:5] == at2[o].vector()[:5] for o, f in h.features_at(7).items())


def test_longest_path_ignores_branches_below_the_writer_stage() -> None:
    d = doc(("s0", 0, [fn("early", ["in0"], ["e"], ["r"], start=True)]),
            ("s1", 1, [fn("w", ["in1"], ["x"], ["r"], start=True)]),
            ("s2", 2, [fn("r", ["x", "e"], ["out"], [])]))
    f = build(d).objects["x"].features
    assert f is not None and f.M_path == 2 and f.N_functions == 2


def test_wide_graph_features_are_memoized() -> None:
    n = 2000
    d = doc(("s0", 0, [fn("split", ["in"], [f"c{k}" for k in range(n)], [], start=True)]),
            ("s1", 1, [fn(f"m{k}", [f"c{k}"], [f"p{k}"], []) for k in range(n)]),
            ("s2", 2, [fn(f"r{j}", [f"p{k}" for k in range(j, n, 10)], [f"o{j}"], []) for j in range(10)]),
            ("s3", 3, [fn("merge", [f"o{j}" for j in range(10)], ["final"], [])]))
    h = build(d)
    assert len(h.functions) == n + 12
    assert h.objects["c0"].features is not None and h.objects["c0"].features.M_path == 2
    assert h.objects["o3"].features is not None


def test_to_dict_matches_the_documented_shape(example_paths: dict[str, Path]) -> None:
    h = hdag.build(wds.load(example_paths["wordcount"]))
    d = json.loads(json.dumps(h.to_dict()))
    assert set(d) >= {"workflow", "objects", "functions"}
    obj = d["objects"]["chunk_00"]
    assert set(obj) >= {"producer", "readers", "read_count", "pattern", "features"}
    assert set(obj["features"]) == {"F_stage", "T_read", "N_functions", "D_stage", "M_path", "W_write", "W_read"}
    assert set(d["functions"]["merger"]) >= {"stage", "inputs", "outputs", "last_output"}
    assert d["objects"]["word_counts"]["features"] is None


def test_dot_and_png(tmp_path: Path, fig9_path: Path) -> None:
    h = hdag.build(wds.load(fig9_path))
    dot = hdag.to_dot(h)
    assert dot.startswith("digraph") and '"fn:F6"' in dot and "a (reads: 2)" in dot
    png = hdag.render_png(h, tmp_path / "g.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- property tests on random DAGs ------------------------------------------------

@st.composite
def random_workflows(draw: st.DrawFn) -> dict:
    n_stages = draw(st.integers(1, 4))
    per_stage = [draw(st.integers(1, 4)) for _ in range(n_stages)]
    names = [[f"f{s}_{k}" for k in range(c)] for s, c in enumerate(per_stage)]
    outputs: dict[str, list[str]] = {}
    stages = []
    for s, fs in enumerate(names):
        entries = []
        for name in fs:
            n_out = draw(st.integers(0, 3))
            outs = [f"{name}_o{k}" for k in range(n_out)]
            earlier = [o for prev in names[:s] for f in prev for o in outputs[f]]
            if s == 0 or not earlier:
                ins, start = [f"in_{name}"], True
            else:
                ins = draw(st.lists(st.sampled_from(earlier), min_size=1, max_size=4, unique=True))
                start = False
            outputs[name] = outs
            entries.append(fn(name, ins, outs, [], start=start))
        stages.append((f"stage{s}", s, entries))
    return doc(*stages)


@settings(max_examples=60, deadline=None)
@given(random_workflows())
def test_read_counts_add_up(d: dict) -> None:
    h = build(d)
    pairs = sum(len(f.inputs) for f in h.functions.values())
    assert sum(o.read_count for o in h.objects.values()) == pairs
    flows = sum(1 for *_, k in h.graph.edges(data="kind") if k == "flow")
    assert flows == pairs


@settings(max_examples=60, deadline=None)
@given(random_workflows())
def test_every_read_object_has_one_producer_or_is_an_input(d: dict) -> None:
    h = build(d)
    writers: dict[str, int] = {}
    for f in h.functions.values():
        for o in f.outputs:
            writers[o] = writers.get(o, 0) + 1
    for o in h.objects.values():
        if o.read_count > 0:
            assert writers.get(o.name, 0) == (0 if o.is_input else 1)
        if o.features is not None:
            assert o.features.T_read == o.read_count
            assert o.features.M_path >= 2 and o.features.D_stage >= 0
            assert o.features.F_stage == h.functions[o.producer].stage  # type: ignore[index]


@settings(max_examples=40, deadline=None)
@given(random_workflows())
def test_last_output_is_the_last_declared_output(d: dict) -> None:
    h = build(d)
    for f in h.functions.values():
        assert f.last_output == (f.outputs[-1] if f.outputs else None)
