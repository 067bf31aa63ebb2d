"""The documentation site: `mkdocs build --strict` passes, broken links and anchors fail it, the
CLI reference is made from the parsers, benchmark pages from checked-in JSON, and README stays a
short front page with the two commands as they are."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from sdk.cli import build_parser

REPO = Path(__file__).resolve().parent.parent.parent
SCRIPTS = REPO / "scripts"


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_test_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "-d", str(site)], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


def test_site_builds_strict(tmp_path: Path) -> None:
    proc = _mkdocs(REPO / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, f"mkdocs build --strict failed (pip install -e '.[dev]'):\n{proc.stderr[-6000:]}"
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "funcsion run" in cli and "--admit-budget" in cli
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "start_run" in api
    import sdk

    # every exported name has its entry, also one exported after the page was written
    missing = [name for name in sdk.__all__ if f'id="sdk.{name}"' not in api]
    assert not missing, f"sdk exports {missing} but docs/reference/api.md does not document them"


def _small_site(tmp_path: Path, page: str) -> Path:
    """mkdocs.yml's own settings (theme, hooks, markdown, validation) over a one-page docs dir."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n## A section\n\ntext\n")
    (docs / "page.md").write_text(page)
    config["docs_dir"] = str(docs)
    config["hooks"] = [str(REPO / h) for h in config["hooks"]]
    config["plugins"] = ["search"]
    config["nav"] = [{"Home": "index.md"}, {"Page": "page.md"}]
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(("page", "named"), [
    ("# Page\n\nsee [nowhere](missing.md)\n", "missing.md"),
    ("# Page\n\nsee [the section](index.md#no-such-section)\n", "no-such-section"),
])
def test_broken_internal_link_or_anchor_fails_the_build(tmp_path: Path, page: str, named: str) -> None:
    proc = _mkdocs(_small_site(tmp_path, page), tmp_path / "site")
    assert proc.returncode != 0
    assert named in proc.stderr


def test_a_good_link_builds(tmp_path: Path) -> None:
    proc = _mkdocs(_small_site(tmp_path, "# Page\n\nsee [the section](index.md#a-section)\n"), tmp_path / "site")
    assert proc.returncode == 0, proc.stderr


def test_cli_reference_has_every_command_of_the_parsers() -> None:
    render_cli = _script("render_cli")
    text = render_cli.render()
    words = [w for w, _, _ in render_cli.commands(build_parser())]
    assert ("bench", "store") in words and ("serve", "daemon") in words and ("run",) in words
    for w in words:
        assert f"funcsion {' '.join(w)} {{ #{'-'.join(w)} }}" in text
    # each command's --help as argparse prints it, options included
    assert "--kill-storage-rate" in text and "--iters" in text


def test_every_benchmark_page_renders_its_checked_in_json() -> None:
    render_bench = _script("render_bench")
    pages = {p.stem: p.read_text() for p in (REPO / "docs" / "benchmarks").glob("*.md") if p.stem != "index"}
    assert set(pages) == set(render_bench.HEADLINES)
    for name, text in pages.items():
        assert f"<!-- funcsion:bench {name} -->" in text, name
    for path in (REPO / "docs" / "bench").glob("*.json"):
        record = json.loads(path.read_text())
        assert record["command"].startswith(f"funcsion bench {path.stem} ") and record["command"].endswith("--json")
        assert len(record["load_before"]) == 3 and isinstance(record["result"], dict)
        md = render_bench.render(path.stem)
        assert record["command"] in md and "Every figure of this run" in md


def test_a_missing_benchmark_json_says_how_to_make_it(tmp_path: Path) -> None:
    md = _script("render_bench").render("store", bench_dir=tmp_path)
    assert "Not measured yet" in md and "python scripts/bench_json.py store" in md


def test_headline_targets_are_judged_from_the_json(tmp_path: Path) -> None:
    render_bench = _script("render_bench")
    record = {"command": "funcsion bench run --json", "started_utc": "x", "commit": "c", "seconds": 1,
              "cpus": 2, "load_before": [1, 1, 1], "load_after": [1, 1, 1],
              "result": {"cold_vs_import": 0.7, "warm_overhead_ms": 1.0}}
    (tmp_path / "run.json").write_text(json.dumps(record))
    md = render_bench.render("run", bench_dir=tmp_path)
    assert re.search(r"cold start against `import sdk` \| 0\.7x \| ≤ 0\.5 \| \*\*not met\*\*", md), md
    assert re.search(r"warm invocation.*\| 1 ms \| ≤ 5 \| met", md), md


def test_readme_is_short_and_keeps_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert 'pip install -e ".[local]" && funcsion run examples/wordcount/wordcount.wds.json' in readme
    assert "./scripts/test" in readme
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / target).is_file(), f"README links to {target}, which does not exist"


@pytest.mark.parametrize(("page", "claim"), [
    # sdk/cli/_env.py's hint for an unknown FUNCSION_* variable
    ("docs/configuration.md", "`FUNCSION_<FIELD>`"),
    # sdk/cli/deploy_workflow.py's warning without --layer
    ("docs/deploy-aws.md", "## 2. The layer for the task Lambdas"),
    # sdk/_config.py, wds/_limits.py, wds/_templates.py, hdag/_graph.py, sdk/cli/inspect_cmd.py
    ("docs/workflow.md", "### Validation"),
    ("docs/workflow.md", "### Fan-out templates"),
    ("docs/workflow.md", "## Inspecting a workflow"),
    ("docs/run-report.md", "## Fields"),
])
def test_pages_that_messages_and_docstrings_name_hold_the_claim(page: str, claim: str) -> None:
    assert claim in (REPO / page).read_text()


def test_the_layer_section_names_the_packages_the_warning_names() -> None:
    from sdk.deploy._zip import TASK_LAYER_PACKAGES

    section = (REPO / "docs" / "deploy-aws.md").read_text().split("## 2. The layer for the task Lambdas")[1]
    section = section.split("\n## ")[0]
    for package in TASK_LAYER_PACKAGES:
        assert package in section


def test_a_matrix_names_sizes_and_leaves_out_columns_no_case_has(tmp_path: Path) -> None:
    record = {"command": "funcsion bench store --json", "started_utc": "x", "commit": "c", "seconds": 1,
              "cpus": 2, "load_before": [1, 1, 1], "load_after": [1, 1, 1],
              "result": {"sizes": {"4096": {"put_p50_us": 190.0, "get_p50_us": 110.0},
                                   "104857600": {"put_p50_us": 120000.0, "get_p50_us": 70000.0}}}}
    (tmp_path / "store.json").write_text(json.dumps(record))
    md = _script("render_bench").render("store", bench_dir=tmp_path)
    assert "| size | PUT p50 | GET p50 |" in md
    assert "| 4 KiB | 190.0 | 110.0 |" in md and "| 100 MiB | 120,000 | 70,000 |" in md


def test_the_defaults_the_pages_state_are_the_codes() -> None:
    """The settings' defaults README and the concept pages name (busy placement, GC window,
    failover windows) are the code's: a changed default fails here until the pages say it."""
    from metadata_server._busy import BUSY_BYTES, BUSY_HOLD_S, BUSY_QUEUE_DEPTH
    from sdk import Config
    from sdk._client import DEFAULT_FAILOVER_S, Endpoints
    from storage_functions.daemon import DaemonConfig

    assert (BUSY_QUEUE_DEPTH, BUSY_BYTES, BUSY_HOLD_S) == (3, 8 << 20, 1.0)
    placement = (REPO / "docs" / "placement.md").read_text()
    assert "at least 3 queued requests or at least 8 MiB of PUT bytes in flight is *busy* for 1 s" in placement
    d = DaemonConfig()
    assert (d.gc_interval_s, d.gc_active, d.gc_degraded) == (60.0, 1, 2)
    assert d.gc_interval_s * (d.gc_active + d.gc_degraded) == 180      # H = 3 minutes
    for claim in ("Every `gc_interval_s` (60 s;", "`gc_active` rounds active (1;", "`gc_degraded` rounds degraded (2;",
                  "H = 3 minutes by default"):
        assert claim in placement, claim
    c = Config()
    assert DEFAULT_FAILOVER_S == c.metadata_failover_s == c.daemon_failover_s == 120.0
    assert Endpoints.__dataclass_fields__["metadata_failover_s"].default == DEFAULT_FAILOVER_S
    assert "default 120 s each" in (REPO / "docs" / "durability.md").read_text()
    assert "`daemon_failover_s`,\n120 s each by default" in (REPO / "README.md").read_text()
    assert c.offload_threshold_bytes == 64 * 1024
    assert "turns results\n  over 64 KiB into references" in (REPO / "README.md").read_text()
    assert "(`FUNCSION_OFFLOAD_THRESHOLD_BYTES`, default 64 KiB)" in (REPO / "docs" / "offload.md").read_text()
