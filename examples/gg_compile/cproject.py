"""A generated C project for the gg-style compile example: ``units`` translation units
with a header dependency graph, and a runtime library beside them.

- ``src/main.c`` (unit 0) includes every module header and calls every module, then
  prints one line per module and a checksum through the runtime library;
- ``src/mod_NN.c`` (units 1..units-1) each define ``mod_NN`` from ``funcs`` static
  helpers, its own header's inline step and the inline steps of the modules it depends
  on, and call the runtime's ``rt_mix``;
- ``include/mod_NN.h`` includes ``cfg.h`` and the headers of up to three earlier
  modules (the dependency graph, a DAG), so a unit needs the transitive closure of its
  includes; ``include/rt.h`` declares the runtime; ``runtime/*.c`` implement it.

The same ``units``, ``funcs`` and ``seed`` give the same files, and ``expected_output``
computes, in Python with the same 64-bit arithmetic, what the built program prints:
a test of the whole build that does not trust the build.

As a script it writes the tree: ``python examples/gg_compile/cproject.py --out DIR
[--units 8] [--funcs 12]`` (then ``make -C DIR`` builds it the ordinary way).
"""

from __future__ import annotations

import argparse
import io
import random
import tarfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Project", "plan_project", "files", "expected_output", "tar_bytes", "SEED"]

SEED = 13
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MIX_MUL = 0xFF51AFD7ED558CCD


def rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & M64


def rt_mix(a: int, b: int) -> int:
    """The runtime's ``rt_mix`` (``runtime/rt_mix.c``), bit for bit."""
    x = a ^ ((b + GOLDEN + ((a << 6) & M64) + (a >> 2)) & M64)
    return rotl((x * MIX_MUL) & M64, 31)


@dataclass(frozen=True)
class Helper:
    mul: int
    add: int
    rot: int

    def __call__(self, x: int) -> int:
        return rotl((x * self.mul + self.add) & M64, self.rot)


@dataclass(frozen=True)
class Module:
    index: int
    salt: int
    step_mul: int
    deps: tuple[int, ...]
    helpers: tuple[Helper, ...]

    @property
    def name(self) -> str:
        return f"mod_{self.index:02d}"

    def step(self, x: int) -> int:
        """``mod_NN_step``, the inline function of ``include/mod_NN.h``."""
        return ((x ^ self.salt) * self.step_mul) & M64


@dataclass(frozen=True)
class Project:
    units: int
    funcs: int
    seed: int
    cfg_seed: int
    modules: tuple[Module, ...]


def plan_project(units: int, funcs: int, seed: int = SEED) -> Project:
    """The project's shape and constants (drawn from ``seed``)."""
    if units < 2:
        raise ValueError(f"a project needs at least 2 units (main and a module), got {units}")
    if funcs < 1:
        raise ValueError(f"each module needs at least 1 helper function, got funcs={funcs}")
    rng = random.Random(seed)

    def odd() -> int:
        return rng.getrandbits(64) | 1

    mods = []
    for k in range(1, units):
        earlier = list(range(1, k))
        deps = tuple(sorted(rng.sample(earlier, min(len(earlier), rng.randint(0, 3)))))
        helpers = tuple(Helper(odd(), rng.getrandbits(64), rng.randint(1, 63)) for _ in range(funcs))
        mods.append(Module(k, rng.getrandbits(64), odd(), deps, helpers))
    return Project(units, funcs, seed, rng.getrandbits(64), tuple(mods))


def module_value(p: Project, m: Module, x: int) -> int:
    for h in m.helpers:
        x = h(x)
    for d in m.deps:
        x = rt_mix(x, p.modules[d - 1].step(x))
    return m.step(x)


def expected_output(units: int, funcs: int, seed: int = SEED) -> str:
    """What the built program prints."""
    p = plan_project(units, funcs, seed)
    acc = p.cfg_seed
    lines = [f"gg-compile: {units} units"]
    for m in p.modules:
        acc = module_value(p, m, acc)
        lines.append(f"{m.name} {acc:016x}")
    lines.append(f"checksum {rt_mix(acc, units):016x}")
    return "\n".join(lines) + "\n"


# -- the C text -----------------------------------------------------------------------

def _u64(v: int) -> str:
    return f"0x{v:016x}ULL"


RT_H = """\
#ifndef RT_H
#define RT_H
#include <stdint.h>
uint64_t rt_rotl(uint64_t x, unsigned r);
uint64_t rt_mix(uint64_t a, uint64_t b);
void rt_report(const char *name, uint64_t value);
#endif
"""

RT_MIX_C = f"""\
#include "rt.h"

uint64_t rt_rotl(uint64_t x, unsigned r) {{
    return (x << r) | (x >> (64u - r));
}}

uint64_t rt_mix(uint64_t a, uint64_t b) {{
    uint64_t x = a ^ (b + {_u64(GOLDEN)} + (a << 6) + (a >> 2));
    return rt_rotl(x * {_u64(MIX_MUL)}, 31);
}}
"""

RT_REPORT_C = """\
#include <inttypes.h>
#include <stdio.h>
#include "rt.h"

void rt_report(const char *name, uint64_t value) {
    printf("%s %016" PRIx64 "\\n", name, value);
}
"""


def _header(m: Module) -> str:
    guard = f"{m.name.upper()}_H"
    inc = "".join(f'#include "mod_{d:02d}.h"\n' for d in m.deps)
    return (f"#ifndef {guard}\n#define {guard}\n#include <stdint.h>\n#include \"cfg.h\"\n{inc}"
            f"#define {m.name.upper()}_SALT {_u64(m.salt)}\n"
            f"static inline uint64_t {m.name}_step(uint64_t x) {{\n"
            f"    return (x ^ {m.name.upper()}_SALT) * {_u64(m.step_mul)};\n}}\n"
            f"uint64_t {m.name}(uint64_t x);\n#endif\n")


def _source(m: Module) -> str:
    out = [f'#include "{m.name}.h"\n#include "rt.h"\n']
    for i, h in enumerate(m.helpers):
        out.append(f"static uint64_t h{i}(uint64_t x) {{\n"
                   f"    return rt_rotl(x * {_u64(h.mul)} + {_u64(h.add)}, {h.rot});\n}}\n")
    body = [f"    x = h{i}(x);\n" for i in range(len(m.helpers))]
    body += [f"    x = rt_mix(x, mod_{d:02d}_step(x));\n" for d in m.deps]
    out.append(f"uint64_t {m.name}(uint64_t x) {{\n{''.join(body)}    return {m.name}_step(x);\n}}\n")
    return "\n".join(out)


def _main(p: Project) -> str:
    inc = "".join(f'#include "{m.name}.h"\n' for m in p.modules)
    calls = "".join(f'    acc = {m.name}(acc);\n    rt_report("{m.name}", acc);\n' for m in p.modules)
    return (f"#include <stdio.h>\n#include \"cfg.h\"\n#include \"rt.h\"\n{inc}\n"
            f"int main(void) {{\n    uint64_t acc = CFG_SEED;\n    printf(\"gg-compile: %d units\\n\", CFG_UNITS);\n"
            f"{calls}    rt_report(\"checksum\", rt_mix(acc, CFG_UNITS));\n    return 0;\n}}\n")


MAKEFILE = """\
# The same build without funcsion: make -C <this directory>
CFLAGS ?= -std=c11 -O2 -Wall
SRCS := $(wildcard src/*.c)
program: $(SRCS:.c=.o) libruntime.a
\t$(CC) -o $@ $^
src/%.o: src/%.c
\t$(CC) $(CFLAGS) -Iinclude -c -o $@ $<
libruntime.a: runtime/rt_mix.o runtime/rt_report.o
\tar rcs $@ $^
runtime/%.o: runtime/%.c
\t$(CC) $(CFLAGS) -Iinclude -c -o $@ $<
"""


def files(units: int, funcs: int, seed: int = SEED) -> dict[str, str]:
    """Every file of the project: relative path -> text."""
    p = plan_project(units, funcs, seed)
    out = {
        "include/cfg.h": (f"#ifndef CFG_H\n#define CFG_H\n#define CFG_SEED {_u64(p.cfg_seed)}\n"
                          f"#define CFG_UNITS {units}\n#endif\n"),
        "include/rt.h": RT_H,
        "runtime/rt_mix.c": RT_MIX_C,
        "runtime/rt_report.c": RT_REPORT_C,
        "src/main.c": _main(p),
        "Makefile": MAKEFILE,
    }
    for m in p.modules:
        out[f"include/{m.name}.h"] = _header(m)
        out[f"src/{m.name}.c"] = _source(m)
    return out


def tar_bytes(tree: dict[str, str]) -> bytes:
    """The files as an uncompressed tar, members in name order with fixed metadata (the
    same tree gives the same bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(tree):
            data = tree[name].encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description="Write the generated C project of the gg-style compile example.")
    ap.add_argument("--out", type=Path, required=True, help="directory to write the project to")
    ap.add_argument("--units", type=int, default=8, help="translation units, main.c included (default 8)")
    ap.add_argument("--funcs", type=int, default=12, help="helper functions per module (default 12)")
    ap.add_argument("--seed", type=int, default=SEED)
    a = ap.parse_args()
    for name, text in files(a.units, a.funcs, a.seed).items():
        path = a.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"{a.out}: {a.units} units; the program will print:\n{expected_output(a.units, a.funcs, a.seed)}", end="")


if __name__ == "__main__":
    main()
