"""Run-scoped data tokens for the store (DESIGN.md "Security").

The daemon has one secret, the store token, which the stack's control plane
holds. A task gets no secret: it gets a *run token* for the data path,
``run:<run_id>:<mac>``, where ``mac`` is an HMAC-SHA256 of the run id under
the store token. The daemon checks it without asking anyone and then serves
only keys under ``<run_id>/``, so one run's tasks cannot read, overwrite or
free another run's objects, and a leaked task event exposes one run only.
The same scope covers the SDK's own COS objects, which the daemon reads and
writes for clients: ``<kind>/<run_id>/...`` for each kind in
``CLIENT_COS_KINDS`` (``cos_in_scope``). Stdlib only (it runs in task
Lambdas and in the daemon).
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["mint_run_token", "token_scope", "in_scope", "cos_in_scope", "client_cos_key", "tier_key",
           "RUN_TOKEN_PREFIX", "CLIENT_COS_KINDS"]

RUN_TOKEN_PREFIX = "run:"
_CONTEXT = b"funcsion-store-run-token\x00"
#: The SDK's COS prefixes (``sdk._cos_io``): the COS tier, persisted copies, saved workflow outputs.
CLIENT_COS_KINDS = ("tier", "persisted", "outputs")


def client_cos_key(kind: str, run_id: str, name: str) -> str:
    """``<kind>/<run_id>/<name>``: where the SDK keeps object ``name`` of ``run_id`` in COS
    (``kind`` one of ``CLIENT_COS_KINDS``)."""
    if kind not in CLIENT_COS_KINDS:
        raise ValueError(f"COS kind {kind!r} is not one of {', '.join(CLIENT_COS_KINDS)}")
    return f"{kind}/{run_id}/{name}"


def tier_key(run_id: str, name: str) -> str:
    """The COS key of an object the metadata server placed in the COS tier (the SDK writes
    it; the daemon's control loop deletes it when the object is freed)."""
    return client_cos_key("tier", run_id, name)


def _mac(secret: str, run_id: str) -> str:
    return hmac.new(secret.encode(), _CONTEXT + run_id.encode(), hashlib.sha256).hexdigest()


def mint_run_token(secret: str, run_id: str) -> str:
    """The data token for the objects of ``run_id`` (needs the store token)."""
    if not secret or not run_id or ":" in run_id or "/" in run_id:
        raise ValueError(f"a run token needs the store token and a run id without ':' or '/', got {run_id!r}")
    return f"{RUN_TOKEN_PREFIX}{run_id}:{_mac(secret, run_id)}"


def token_scope(token: object, secret: str) -> str | None:
    """What ``token`` may touch: ``""`` (every key) for the store token itself,
    ``"<run_id>/"`` for a valid run token, ``None`` for anything else (also a
    token that is not a str or not encodable, e.g. a lone surrogate from JSON).
    Comparisons are constant-time."""
    if not secret or not token or not isinstance(token, str):
        return None
    try:
        raw = token.encode()
    except UnicodeEncodeError:
        return None
    if hmac.compare_digest(raw, secret.encode()):
        return ""
    if not token.startswith(RUN_TOKEN_PREFIX):
        return None
    run_id, sep, mac = token[len(RUN_TOKEN_PREFIX):].rpartition(":")
    if not sep or not run_id or "/" in run_id or ":" in run_id:
        return None
    return f"{run_id}/" if hmac.compare_digest(mac.encode(), _mac(secret, run_id).encode()) else None


def in_scope(scope: str, key: str) -> bool:
    """May a client of ``scope`` (from ``token_scope``) touch store key ``key``?"""
    return key.startswith(scope)


def cos_in_scope(scope: str, key: str) -> bool:
    """May a client of ``scope`` touch the SDK's COS object ``key``
    (``<kind>/<run_id>/<name>``, kind one of ``CLIENT_COS_KINDS``)? Keys
    outside those kinds (the daemon's own chunks) are nobody's, not even
    the store token's."""
    kind, sep, rest = key.partition("/")
    return bool(sep) and kind in CLIENT_COS_KINDS and "/" in rest and rest.startswith(scope)
