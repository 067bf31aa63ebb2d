"""Errors of the local stack commands."""

from __future__ import annotations

from wds import FuncsionError

__all__ = ["NoStackError", "StateDirBusy", "DaemonProcessError"]


class NoStackError(FuncsionError):
    """No stack started by ``funcsion up`` is alive in the state directory."""


class StateDirBusy(FuncsionError):
    """Another stack holds the state directory (its lock); names the holder."""


class DaemonProcessError(FuncsionError):
    """The embedded stack's daemon process (``daemon_process``) did not come up; names its log."""
