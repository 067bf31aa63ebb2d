"""MkDocs hooks of the documentation site (mkdocs.yml, ``hooks:``).

On each page, ``<!-- funcsion:cli -->`` becomes the CLI reference generated from
``sdk.cli``'s parsers (scripts/render_cli.py) and ``<!-- funcsion:bench NAME -->`` the
tables of docs/bench/NAME.json (scripts/render_bench.py), so neither the CLI reference nor
a benchmark figure is typed by hand, and ``<!-- funcsion:config -->`` the table of
``sdk.Config``'s fields with their environment variables and defaults, read from the class.
``<!-- funcsion:api-rest MODULE -->`` becomes a ``::: MODULE.NAME`` block (mkdocstrings) for
each name of ``MODULE.__all__`` the page does not document yet, so a newly exported name
appears in the API reference without anyone adding it. A marker naming an unknown benchmark
fails the build.

What this does not do: it changes nothing else on a page.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["on_page_markdown"]

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
if str(_ROOT) not in sys.path:  # sdk (for the CLI parsers) from this source tree
    sys.path.insert(0, str(_ROOT))

_BENCH = re.compile(r"<!--\s*funcsion:bench\s+([a-z_]+)\s*-->")
_CLI = "<!-- funcsion:cli -->"
_CONFIG = "<!-- funcsion:config -->"
_API_REST = re.compile(r"<!--\s*funcsion:api-rest\s+([a-z_.]+)\s*-->")


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_funcsion_docs_{name}", _HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


_render_bench = _load("render_bench")
_render_cli = _load("render_cli")


def render_config() -> str:
    """``sdk.Config``'s fields as a Markdown table: field, environment variable, type, default."""
    import dataclasses

    from sdk import Config

    rows = ["| field | environment variable | type | default |", "|---|---|---|---|"]
    for f in dataclasses.fields(Config):
        if f.name == "sources":
            continue
        default = "" if f.default is dataclasses.MISSING else f.default
        shown = f"`{default!r}`" if default != "" else "(derived, see below)"
        if isinstance(default, int) and not isinstance(default, bool) and default >= 1 << 20 and default % 1024 == 0:
            shown += f" ({default >> 20:,} MiB)"
        rows.append(f"| `{f.name}` | `FUNCSION_{f.name.upper()}` | `{f.type}` | {shown} |")
    return "\n".join(rows)


def _documentable(module_name: str, names: list[str]) -> list[str]:
    """The names mkdocstrings can document: griffe must find each one's definition (a constant
    bound by tuple unpacking, ``A, B = ...``, it cannot; those are left to the prose)."""
    import griffe

    loader = griffe.GriffeLoader(search_paths=[str(_ROOT)])
    for preload in ("funcsion_errors", "funcsion_rpc", "wds"):  # as mkdocs.yml's preload_modules
        loader.load(preload)
    module = loader.load(module_name)
    loader.resolve_aliases(implicit=False, external=None)
    found = []
    for name in names:
        member = module.members.get(name)
        if member is None:
            continue
        try:
            if isinstance(member, griffe.Alias):
                _ = member.target
        except griffe.AliasResolutionError:
            continue
        found.append(name)
    return found


def render_api_rest(module_name: str, markdown: str) -> str:
    """``::: module.name`` for each public name of ``module_name`` not yet on the page."""
    import importlib

    module = importlib.import_module(module_name)
    documented = set(re.findall(rf"^:::\s*{re.escape(module_name)}\.([A-Za-z_][A-Za-z0-9_]*)\s*$", markdown, re.M))
    rest = _documentable(module_name, [n for n in module.__all__ if n not in documented])
    if not rest:
        return ""
    blocks = [f"::: {module_name}.{name}" for name in rest]
    return "## Other names\n\n" + "\n\n".join(blocks) + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if _CLI in markdown:
        markdown = markdown.replace(_CLI, _render_cli.render())
    if _CONFIG in markdown:
        markdown = markdown.replace(_CONFIG, render_config())
    markdown = _API_REST.sub(lambda m: render_api_rest(m.group(1), markdown), markdown)

    def bench(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in _render_bench.HEADLINES:
            raise ValueError(f"{page.file.src_path}: no benchmark {name!r}; the known ones are "
                             f"{', '.join(sorted(_render_bench.HEADLINES))} (scripts/render_bench.py)")
        rendered: str = _render_bench.render(name)
        return rendered

    return _BENCH.sub(bench, markdown)
