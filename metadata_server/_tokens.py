"""Run tokens at rest: the server keeps a SHA-256 digest of each run's token, never the token.

``start_run`` draws a random token (128 bits), returns it to the caller once
and hands the core only ``token_digest(token)``; the ``StartRun`` event, the
journal and ``RunRecord`` hold the digest. A call is authorized by digesting
the token it carries and comparing the two digests in constant time. A plain
(unkeyed) digest is enough for random 128-bit tokens, and it keeps a journal
replayable under any admin token (the embedded stack draws a new one at each
start).

``same_token`` compares two secrets as UTF-8 bytes, so a non-ASCII token on
the wire is simply wrong (``Unauthorized``), never a ``TypeError``.
Not covered: the admin token (it comes from the operator and is never journaled).
"""

from __future__ import annotations

import hashlib
import hmac
import re

__all__ = ["DIGEST_PREFIX", "is_digest", "same_token", "token_digest"]

#: Domain separation: a run token's digest is not the digest of the same string used elsewhere.
DIGEST_PREFIX = b"funcsion run token\0"
_DIGEST = re.compile(r"[0-9a-f]{64}")


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def token_digest(token: str) -> str:
    """The hex SHA-256 digest a run token is stored as."""
    return hashlib.sha256(DIGEST_PREFIX + _utf8(token)).hexdigest()


def is_digest(text: str) -> bool:
    """True for what ``token_digest`` returns (64 lowercase hex digits)."""
    return bool(_DIGEST.fullmatch(text))


def same_token(expected: str, given: str) -> bool:
    """Constant-time comparison of two secrets of any characters."""
    return hmac.compare_digest(_utf8(expected), _utf8(given))
