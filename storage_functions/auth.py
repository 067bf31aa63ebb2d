"""Run-scoped data tokens for the store (DESIGN.md "Security").

The daemon has one secret, the store token, which the stack's control plane
holds. A task gets no secret: it gets a *run token* for the data path,
``run:<run_id>:<mac>``, where ``mac`` is an HMAC-SHA256 of the run id under
the store token. The daemon checks it without asking anyone and then serves
only keys under ``<run_id>/``, so one run's tasks cannot read, overwrite or
free another run's objects, and a leaked task event exposes one run only.
Stdlib only (it runs in task Lambdas and in the daemon).
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["mint_run_token", "token_scope", "in_scope", "RUN_TOKEN_PREFIX"]

RUN_TOKEN_PREFIX = "run:"
_CONTEXT = b"funcsion-store-run-token\x00"


def _mac(secret: str, run_id: str) -> str:
    return hmac.new(secret.encode(), _CONTEXT + run_id.encode(), hashlib.sha256).hexdigest()


def mint_run_token(secret: str, run_id: str) -> str:
    """The data token for the objects of ``run_id`` (needs the store token)."""
    if not secret or not run_id or ":" in run_id or "/" in run_id:
        raise ValueError(f"a run token needs the store token and a run id without ':' or '/', got {run_id!r}")
    return f"{RUN_TOKEN_PREFIX}{run_id}:{_mac(secret, run_id)}"


def token_scope(token: str, secret: str) -> str | None:
    """What ``token`` may touch: ``""`` (every key) for the store token itself,
    ``"<run_id>/"`` for a valid run token, ``None`` for anything else."""
    if not secret or not token:
        return None
    if hmac.compare_digest(token.encode(), secret.encode()):
        return ""
    if not token.startswith(RUN_TOKEN_PREFIX):
        return None
    run_id, sep, mac = token[len(RUN_TOKEN_PREFIX):].rpartition(":")
    if not sep or not run_id or "/" in run_id or ":" in run_id:
        return None
    return f"{run_id}/" if hmac.compare_digest(mac.encode(), _mac(secret, run_id).encode()) else None


def in_scope(scope: str, key: str) -> bool:
    return key.startswith(scope)
