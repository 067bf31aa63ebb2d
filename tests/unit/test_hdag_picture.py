"""The HDAG picture: layout (pure) and the drawn figure's readability (no text on text
or on a node) at word-count 16 x 6 and 64 x 64."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import hdag
import wds
from hdag._layout import PATTERNS, layout, name_range
from hdag._render import figure

REPO = Path(__file__).resolve().parents[2]
WORDCOUNT = REPO / "examples" / "wordcount" / "wordcount.wds.json"


def wordcount(mappers: int, reducers: int) -> hdag.HDAG:
    return hdag.build(wds.load(WORDCOUNT, params={"mappers": mappers, "reducers": reducers}))


@pytest.mark.parametrize("names,label", [
    (["raw_text"], "raw_text"),
    ([f"chunk_{i:02d}" for i in range(16)], "chunk_[00-15]"),
    ([f"counts_{i:02d}_{j:02d}" for i in range(64) for j in range(6)], "counts_[00-63]_[00-05]"),
    (["counts_03_00", "counts_03_01"], "counts_03_[00-01]"),
    (["headers", *[f"src_{i:02d}" for i in range(8)], "runtime_src"], "headers, src_[00-07], runtime_src"),
    (["a", "b1", "c", "d"], "a, b1, c, ..."),
])
def test_name_range(names: list[str], label: str) -> None:
    assert name_range(names) == label


def test_16x6_replicas_in_order_stages_as_columns() -> None:
    lay = layout(wordcount(16, 6))
    assert [(c.kind, c.stage_name) for c in lay.columns] == [
        ("inputs", ""), ("functions", "split_stage"), ("pipes", "split_stage"), ("functions", "map_stage"),
        ("pipes", "map_stage"), ("functions", "reduce_stage"), ("pipes", "reduce_stage"),
        ("functions", "merge_stage"), ("pipes", "merge_stage")]
    assert [n.label for n in lay.column_nodes(3)] == [f"mapper_{i:02d}" for i in range(16)]
    assert [n.label for n in lay.column_nodes(5)] == [f"reducer_{i:02d}" for i in range(6)]
    assert lay.rows == 16 and all(n.members == 1 for n in lay.nodes.values())
    # each pipe sits on its producer's row, labelled with its objects and read counts
    m3 = lay.nodes["f:mapper_03"]
    pipe = lay.nodes["p:f:mapper_03"]
    assert (pipe.column, pipe.row) == (m3.column + 1, m3.row)
    assert pipe.label == "counts_03_[00-05] ×6, 1 read each" and pipe.pattern == "scatter+aggregate"
    assert lay.nodes["p:$inputs"].label == "raw_text, 1 read"
    assert lay.nodes["p:f:merger"].label == "word_counts, output"
    reads = [e for e in lay.edges if e.kind == "reads"]
    shuffle = [e for e in reads if e.src.startswith("p:f:mapper_")]
    assert len(shuffle) == 16 * 6 and {e.pattern for e in shuffle} == {"scatter+aggregate"}
    assert lay.patterns == ["pass", "scatter", "scatter+aggregate", "pass+aggregate", "output"]


def test_64x64_fan_outs_collapse_into_one_node() -> None:
    lay = layout(wordcount(64, 64))
    labels = {n.id: n.label for n in lay.nodes.values()}
    assert labels["g:mapper_{i:02d}"] == "mapper ×64" and labels["g:reducer_{i:02d}"] == "reducer ×64"
    assert labels["p:g:mapper_{i:02d}"] == "counts_[00-63]_[00-63] ×4096, 1 read each"
    assert len(lay.nodes) == 9 and lay.rows == 1
    flows = {(e.src, e.dst): e.flows for e in lay.edges if e.kind == "reads"}
    assert flows[("p:g:mapper_{i:02d}", "g:reducer_{i:02d}")] == 4096
    assert flows[("p:f:splitter", "g:mapper_{i:02d}")] == 64
    assert sum(flows.values()) == sum(o.read_count for o in wordcount(64, 64).objects.values())
    # the threshold is a parameter: 16 mappers stay apart, 17 collapse
    assert "g:mapper_{i:02d}" not in layout(wordcount(16, 2)).nodes
    assert "g:mapper_{i:02d}" in layout(wordcount(17, 2)).nodes


MIXED = """{"app": "mixed", "workflow_id": 1, "category": "compile", "params": {"units": 3}, "spec": {
  "plan_stage": {"stage_id": 0, "functions": [{"start": true, "name": "plan", "input": ["tree"],
    "output": ["headers", "src_{0..units:02d}"], "next": ["preprocess_{0..units:02d}"]}]},
  "pre_stage": {"stage_id": 1, "functions": [{"start": false, "replicas": "units", "name": "preprocess_{i:02d}",
    "input": ["src_{i:02d}", "headers"], "output": ["pre_{i:02d}"], "next": []}]}}}"""


def test_mixed_pipe_gets_one_edge_per_pattern() -> None:
    """One pipe that broadcasts an object and scatters others to the same readers."""
    lay = layout(hdag.build(wds.loads(MIXED)))
    to_pre = sorted((e.pattern, e.lane) for e in lay.edges if e.src == "p:f:plan" and e.dst == "f:preprocess_00")
    assert to_pre == [("broadcast", -0.5), ("scatter", 0.5)]
    assert set(lay.patterns) <= set(PATTERNS)


def _boxes(fig: Any) -> tuple[list[tuple[str, Any]], list[Any]]:
    """Window extents of every label (text) and every node marker in the figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    texts = [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts if t.get_text()]
    marks = [ln.get_window_extent(renderer) for ln in ax.lines if ln.get_marker() not in (None, "None", "")]
    return texts, marks


@pytest.mark.parametrize("mappers,reducers", [(16, 6), (64, 64), (4, 2)])
def test_no_label_sits_on_another_label_or_a_node(mappers: int, reducers: int) -> None:
    import matplotlib.pyplot as plt

    fig = figure(wordcount(mappers, reducers))
    try:
        texts, marks = _boxes(fig)
        flows = {t for t, _ in texts if t.startswith("×")}
        labels = [(t, b) for t, b in texts if t not in flows]
        clash = [(a, b) for (a, ba), (b, bb) in itertools.combinations(labels, 2) if ba.overlaps(bb)]
        assert clash == []
        on_node = [t for t, b in labels for m in marks if b.overlaps(m)]
        assert on_node == []
        width, height = fig.get_size_inches()
        assert all(0 <= b.x0 and b.x1 <= width * fig.dpi and 0 <= b.y0 and b.y1 <= height * fig.dpi
                   for _, b in texts), "a label is cut off at the edge of the picture"
    finally:
        plt.close(fig)


def test_render_png_writes_a_png(tmp_path: Path) -> None:
    out = hdag.render_png(wordcount(16, 6), tmp_path / "wc.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_matplotlib_is_imported_only_when_drawing() -> None:
    code = ("import sys, hdag, wds; h = hdag.build(wds.load(%r)); hdag.to_dot(h); "
            "from hdag._layout import layout; layout(h); print('matplotlib' in sys.modules)") % str(WORDCOUNT)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "False", res.stderr
