"""The gg-style compile example end to end on the local stack: the generated C project is
planned, preprocessed, compiled and assembled per unit, its runtime library built beside,
linked with gcc, every artefact through funcsion; the binary runs and prints what the
generator's Python model of the program says it must. A missing gcc fails these tests."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow
from sdk.local._stack import Stack

from .examples import EXAMPLES, check_freed, funcsion_run, load, output, require_tools

GG = EXAMPLES / "gg_compile" / "gg_compile.wds.json"

# Every run cold-starts a worker per task entry and replica slot, several seconds on 2 cores: slow.


@pytest.fixture(scope="module", autouse=True)
def toolchain() -> None:
    require_tools("gg-compile", "gcc", "ar")


def run_program(binary: bytes, tmp_path: Path) -> str:
    exe = tmp_path / "program"
    exe.write_bytes(binary)
    exe.chmod(0o755)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=30).stdout


@pytest.mark.slow
def test_default_project_builds_and_the_binary_prints_the_expected_result(stack: Stack, tmp_path: Path) -> None:
    r = run_workflow(GG, config=stack.config, stack=stack, options=ExecutorOptions(progress=False))
    assert r.status == "succeeded", r.error
    d = r.to_dict()
    check_freed(d)
    units = [f"{k:02d}" for k in range(8)]
    assert set(d["tasks"]) == {"plan", "build_runtime", "link", *(f"{step}_{u}" for u in units
                                                                  for step in ("preprocess", "compile", "assemble"))}
    for kind in ("src", "pre", "asm", "obj"):  # every artefact went through the store
        assert all(d["objects"][f"{kind}_{u}"]["size"] > 0 for u in units)
    assert list(d["outputs"]) == ["program"]
    cp = load("gg_compile", "cproject")
    assert run_program(output(stack.config.resolved_cos_url, d, "program"), tmp_path) == cp.expected_output(8, 12)


def test_each_unit_travels_with_exactly_the_headers_it_includes() -> None:
    """plan's thunks follow the header dependency graph: a module's thunk holds its own
    header, the headers of the modules it depends on, transitively, and no others."""
    cp, handlers = load("gg_compile", "cproject"), load("gg_compile", "handlers")
    project = cp.plan_project(8, 12)
    tree = {k: v.encode() for k, v in cp.files(8, 12).items()}
    for m in project.modules:
        want, todo = {f"include/{m.name}.h", "include/cfg.h", "include/rt.h"}, list(m.deps)
        while todo:
            dep = project.modules[todo.pop() - 1]
            want.add(f"include/{dep.name}.h")
            todo += dep.deps
        assert set(handlers.include_closure(f"src/{m.name}.c", tree)) == want, m.name
    assert len(handlers.include_closure("src/main.c", tree)) == len(project.modules) + 2


@pytest.mark.slow
def test_a_larger_project_through_the_command_line(tmp_path: Path) -> None:
    r = funcsion_run(GG, tmp_path / "state", "--param", "units=16", "--param", "funcs=60")
    assert r["status"] == "succeeded", r["error"]
    check_freed(r)
    assert sum(1 for n in r["tasks"] if n.startswith("compile_")) == 16
    binary = output(f"file://{tmp_path / 'state' / 'cos'}", r, "program")
    assert run_program(binary, tmp_path) == load("gg_compile", "cproject").expected_output(16, 60)


def test_a_tree_that_does_not_fit_the_workflow_fails_once_with_the_fix(stack: Stack, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in {"src/main.c": "int main(void) { return 0; }\n", "runtime/rt.c": "int rt;\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    tree = tmp_path / "tree.tar"
    tree.write_bytes(buf.getvalue())
    r = run_workflow(GG, config=stack.config, stack=stack, inputs={"source_tree": str(tree)},
                     options=ExecutorOptions(progress=False))
    assert r.status == "failed" and r.failed_task == "plan"
    assert r.tasks["plan"]["attempts"] == 1  # no retry can fix it
    assert "has 1 translation units (src/*.c) but the workflow builds units=8; run it with --param units=1" in r.error
    assert r.memory["leaked_bytes"] == 0
