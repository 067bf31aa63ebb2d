"""The SDK's own COS objects, next to the store's (which the daemon owns).

Three kinds, each under its own prefix of the stack's COS (``cos_url``):

- ``tier/<run_id>/<name>``: objects the metadata server placed in the COS tier
  instead of function memory (a run started with ``latency_sensitive=False``,
  or over its capacity hint or the stack's memory budget). The encoded frame
  (codec byte + payload); deleted when the object is freed.
- ``persisted/<run_id>/<name>``: ``put(..., persist=True)`` copies (Pocket's
  PERSIST flag): the frame, kept after the run until ``Client.delete``.
- ``outputs/<run_id>/<name>``: workflow outputs, copied after a successful run;
  the payload only (no codec byte), so other tools can read the file as is.

Tasks and drivers reach these through the daemon (``StoreClient.cos_put`` /
``cos_get`` / ``cos_delete``), which holds the COS credentials and allows a
run token only its own run's keys of each kind (``storage_functions.auth``).
Covers the key layout (``storage_functions.auth.client_cos_key``: the daemon deletes
COS-tier objects when they are freed, so the naming lives below both) and the location
strings reports show; not the store.
"""

from __future__ import annotations

from urllib.parse import quote, unquote, urlsplit

from storage_functions.auth import CLIENT_COS_KINDS, client_cos_key, tier_key

__all__ = ["tier_key", "persist_key", "output_key", "cos_location", "TIER_PREFIX", "PERSIST_PREFIX",
           "OUTPUT_PREFIX"]

TIER_PREFIX, PERSIST_PREFIX, OUTPUT_PREFIX = CLIENT_COS_KINDS


def persist_key(run_id: str, name: str) -> str:
    return client_cos_key(PERSIST_PREFIX, run_id, name)


def output_key(run_id: str, name: str) -> str:
    return client_cos_key(OUTPUT_PREFIX, run_id, name)


def cos_location(url: str, key: str) -> str:
    """Where ``key`` lives in the stack's COS at ``url``, for people and other tools (the key
    alone when the COS URL is not known, e.g. a driver of a split deployment given only
    addresses): for a
    local COS the path of the file that holds it (``LocalCOS``'s layout: segments
    percent-encoded, the last one ending in ``%obj``; a test pins the two together; tasks
    import no COS adapter), for S3 ``s3://bucket/prefix/key``."""
    if not url:
        return key
    if url.startswith("/"):
        url = "file://" + url
    parts = urlsplit(url)
    if parts.scheme == "file":
        segs = [quote(s, safe="") for s in key.split("/")]
        segs[-1] += "%obj"
        return "/".join([unquote(parts.path).rstrip("/"), *segs])
    if parts.scheme == "s3":
        prefix = unquote(parts.path).strip("/")
        return f"s3://{parts.netloc}/{prefix + '/' if prefix else ''}{key}"
    return f"{url.rstrip('/')}/{key}"
