"""``put(..., persist=...)``'s argument (Pocket's PERSIST flag with its timeout, OSDI'18
Sec. 3.2): ``False`` keeps no copy, ``True`` a COS copy with the store's default lifetime
(the daemon's ``persist_ttl_s``, from the stack's config; 0 keeps it until
``Client.delete``), a ``timedelta`` or a number of seconds a copy that the daemon's sweep
deletes that long after the run ends. Only the argument's meaning: the copy itself is
``sdk._client``'s, its lifetime the daemon's (``storage_functions.daemon._persisted``).
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Union

from ._config import ConfigError

__all__ = ["Persist", "persist_lifetime"]

Persist = Union[bool, int, float, timedelta]


def persist_lifetime(persist: Persist) -> float | None | bool:
    """False (no copy), None (the store's default lifetime) or the lifetime in seconds."""
    if persist is False or persist is None:
        return False
    if persist is True:
        return None
    seconds = persist.total_seconds() if isinstance(persist, timedelta) else persist
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
            or seconds <= 0:
        raise ConfigError(f"put(persist={persist!r}): pass True, False, a timedelta or a number of seconds "
                          "greater than 0 (the copy's lifetime after the run ends)")
    return float(seconds)
