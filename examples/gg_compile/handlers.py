"""gg-style compile as a funcsion workflow (see gg_compile.wds.json and README.md).

``plan`` reads the source tree (a tar: ``src/*.c`` translation units, ``include/*.h``,
``runtime/*.c``), follows each unit's ``#include "..."`` lines through the header
dependency graph and writes one *thunk* per unit: a tar of the unit and exactly the
headers it needs, with a ``thunk.json`` naming the unit (gg infers the same dependency
sets). Each unit is then preprocessed (``gcc -E``), compiled to assembly (``gcc -S``)
and assembled (``gcc -c``) by its own task, while ``build_runtime`` compiles the runtime
library (``ar``); ``link`` links the objects with it into ``program``.

Every artefact passes through funcsion as a file: a task streams its inputs to a
temporary directory (``sdk.get(name, stream=True)``), runs the tool there and streams
the result back (``sdk.put(name, open(path, "rb"))``).
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import sdk

CC = os.environ.get("CC", "gcc")
CFLAGS = ["-std=c11", "-O2", "-Wall"]
INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


def build_failed(message: str) -> sdk.FatalTaskError:
    """A tool failed, or the source tree does not fit the workflow: the same inputs would
    fail again, so no retry (``FatalTaskError``)."""
    return sdk.FatalTaskError(message, cause="BuildError")


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise build_failed(f"the gg-compile example needs {name!r} on PATH (e.g. apt-get install gcc binutils); "
                         f"PATH={os.environ.get('PATH', '')}")
    return path


def run(cmd: list[str], cwd: Path) -> str:
    """Run a build command in ``cwd``; its diagnostics (warnings); ``build_failed`` if it fails."""
    proc = subprocess.run([tool(cmd[0]), *cmd[1:]], cwd=cwd, capture_output=True, text=True, timeout=240,
                          check=False)
    if proc.returncode != 0:
        raise build_failed(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stderr.strip()


def fetch(name: str, path: Path) -> Path:
    """Stream object ``name`` into the file ``path``."""
    with sdk.get(name, stream=True) as stream, open(path, "wb") as out:
        out.writelines(stream)  # one stripe at a time
    return path


def store(name: str, path: Path) -> None:
    """Stream the file ``path`` into object ``name``."""
    with open(path, "rb") as fh:
        sdk.put(name, fh)


# -- plan -------------------------------------------------------------------------------

def read_tree(path: Path) -> dict[str, bytes]:
    """The regular files of a tar, by normalised relative path."""
    out = {}
    try:
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                name = posixpath.normpath(m.name.lstrip("/"))
                if not m.isfile() or name.startswith(".."):
                    continue
                f = tar.extractfile(m)
                assert f is not None
                out[name] = f.read()
    except tarfile.TarError as exc:
        raise build_failed(f"the source tree is not a tar archive ({exc}); give one with "
                         "--input source_tree=project.tar (tar -C DIR -cf project.tar .)") from None
    return out


def include_closure(unit: str, tree: dict[str, bytes]) -> list[str]:
    """The headers ``unit`` includes with ``#include "..."``, transitively, looked up beside
    the including file and then in ``include/``; system headers (``<...>``) are the
    compiler's."""
    seen: list[str] = []
    todo = [unit]
    while todo:
        f = todo.pop()
        for inc in INCLUDE.findall(tree[f]):
            rel = inc.decode()
            here = posixpath.normpath(posixpath.join(posixpath.dirname(f), rel))
            found = next((c for c in (here, posixpath.normpath(posixpath.join("include", rel))) if c in tree), None)
            if found is None:
                raise build_failed(f'{f} includes "{rel}", which the source tree does not have '
                                 f"(looked for {here} and include/{rel})")
            if found not in seen:
                seen.append(found)
                todo.append(found)
    return sorted(seen)


def thunk(path: Path, files: dict[str, bytes], meta: dict[str, object]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in [("thunk.json", json.dumps(meta).encode()), *sorted(files.items())]:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


@sdk.task
def plan(event: dict, context: object) -> dict:
    (source,) = sdk.inputs()
    *unit_names, runtime_name = sdk.outputs()
    with tempfile.TemporaryDirectory() as tmp:
        tree = read_tree(fetch(source, Path(tmp) / "tree.tar"))
        units = sorted(n for n in tree if n.startswith("src/") and n.endswith(".c"))
        runtime = sorted(n for n in tree if n.startswith("runtime/") and n.endswith(".c"))
        if len(units) != len(unit_names):
            raise build_failed(f"the source tree has {len(units)} translation units (src/*.c) but the workflow "
                             f"builds units={len(unit_names)}; run it with --param units={len(units)}")
        if not runtime:
            raise build_failed("the source tree has no runtime library sources (runtime/*.c)")
        deps = {}
        for name, unit in zip(unit_names, units):
            headers = include_closure(unit, tree)
            deps[unit] = headers
            store(name, thunk(Path(tmp) / f"{name}.tar", {f: tree[f] for f in [unit, *headers]},
                              {"unit": unit, "headers": headers}))
        headers = sorted({h for r in runtime for h in include_closure(r, tree)})
        store(runtime_name, thunk(Path(tmp) / "runtime.tar", {f: tree[f] for f in [*runtime, *headers]},
                                  {"sources": runtime, "headers": headers}))
    return {"units": len(units), "runtime_sources": len(runtime),
            "headers_per_unit": {u: len(h) for u, h in deps.items()}}


# -- per unit ---------------------------------------------------------------------------

def unpack(name: str, work: Path) -> dict:
    """Stream a thunk into ``work`` and unpack it; its ``thunk.json``."""
    with tarfile.open(fetch(name, work / "thunk.tar")) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: refuse links and paths out of work
            tar.extractall(work, filter="data")
        else:
            tar.extractall(work)
    return json.loads((work / "thunk.json").read_text())


@sdk.task
def preprocess(event: dict, context: object) -> dict:
    (src,) = sdk.inputs()
    (out,) = sdk.outputs()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        meta = unpack(src, work)
        diag = run([CC, "-E", *CFLAGS, "-Iinclude", meta["unit"], "-o", "unit.i"], work)
        store(out, work / "unit.i")
        return {"unit": meta["unit"], "headers": len(meta["headers"]), "bytes": (work / "unit.i").stat().st_size,
                "warnings": diag}


@sdk.task
def compile(event: dict, context: object) -> dict:  # the gg step's name (shadows the builtin here only)
    (pre,) = sdk.inputs()
    (out,) = sdk.outputs()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fetch(pre, work / "unit.i")
        diag = run([CC, "-S", *CFLAGS, "-x", "cpp-output", "unit.i", "-o", "unit.s"], work)
        store(out, work / "unit.s")
        return {"bytes": (work / "unit.s").stat().st_size, "warnings": diag}


@sdk.task
def assemble(event: dict, context: object) -> dict:
    (asm,) = sdk.inputs()
    (out,) = sdk.outputs()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fetch(asm, work / "unit.s")
        run([CC, "-c", "-x", "assembler", "unit.s", "-o", "unit.o"], work)
        store(out, work / "unit.o")
        return {"bytes": (work / "unit.o").stat().st_size}


@sdk.task
def build_runtime(event: dict, context: object) -> dict:
    (src,) = sdk.inputs()
    (out,) = sdk.outputs()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        meta = unpack(src, work)
        objs = []
        for k, source in enumerate(meta["sources"]):
            obj = f"rt_{k:03d}.o"
            run([CC, "-c", *CFLAGS, "-Iinclude", source, "-o", obj], work)
            objs.append(obj)
        run(["ar", "rcsD", "libruntime.a", *objs], work)
        store(out, work / "libruntime.a")
        return {"sources": len(objs), "bytes": (work / "libruntime.a").stat().st_size}


@sdk.task
def link(event: dict, context: object) -> dict:
    library = "libruntime"
    objects = [n for n in sdk.inputs() if n != library]
    (out,) = sdk.outputs()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths = [fetch(o, work / f"{o}.o").name for o in objects]
        fetch(library, work / "libruntime.a")
        run([CC, "-o", "program", *paths, "libruntime.a"], work)
        store(out, work / "program")
        return {"objects": len(paths), "bytes": (work / "program").stat().st_size}
