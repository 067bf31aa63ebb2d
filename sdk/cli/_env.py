"""Warnings for ``FUNCSION_*`` environment variables that funcsion does not read.

A misspelt setting (``FUNCSION_METADTA_PORT=9000``) would otherwise be ignored
without a word. ``known_env_vars`` joins every name funcsion reads: one per
``Config`` field, the names in ``sdk._constants``, the local platform's
(``storage_functions.local._config.ENV``), the two it sets in its instance
processes and the daemon's invariant check (``storage_functions.daemon._config``). ``unknown_env_warnings`` is pure: the CLI prints what it returns.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from .. import _constants
from .._config import Config

__all__ = ["known_env_vars", "unknown_env_warnings", "INSTANCE_ENV", "RENAMED"]

#: set by the local platform in each storage-function and task instance process
INSTANCE_ENV = ("FUNCSION_LOCAL_PLATFORM", "FUNCSION_INSTANCE_ID")
#: names funcsion read before, and what to set instead
RENAMED = {"FUNCSION_METADATA_HOST": "FUNCSION_HOST"}


def known_env_vars() -> frozenset[str]:
    from storage_functions.daemon._config import CHECK_STATE_ENV
    from storage_functions.local._config import ENV as PLATFORM_ENV

    names = {_constants.ENV_PREFIX + f.upper() for f in Config.field_names()}
    names |= {v for k, v in vars(_constants).items()
              if k.startswith("ENV_") and k != "ENV_PREFIX" and isinstance(v, str)}
    return frozenset(names | set(PLATFORM_ENV.values()) | set(INSTANCE_ENV) | {CHECK_STATE_ENV})


def unknown_env_warnings(environ: Mapping[str, str]) -> list[str]:
    """One line per ``FUNCSION_*`` variable in ``environ`` that funcsion does not read,
    with the closest known name when one is close."""
    prefix = _constants.ENV_PREFIX
    known = known_env_vars()
    suffixes = {k[len(prefix):]: k for k in sorted(known)}
    out = []
    for name in sorted(environ):
        if not name.startswith(prefix) or name in known:
            continue
        close = difflib.get_close_matches(name[len(prefix):], list(suffixes), n=1, cutoff=0.75)
        if name in RENAMED:
            hint = f"set {RENAMED[name]} instead"
        elif close:
            hint = f"did you mean {suffixes[close[0]]}?"
        else:
            hint = "settings are FUNCSION_<FIELD> for the fields in docs/configuration.md"
        out.append(f"environment variable {name} is not a funcsion setting and is ignored; {hint}")
    return out
