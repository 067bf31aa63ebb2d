"""Size limits of the metadata service's wire protocol, shared by the server and its clients.

- ``MAX_WDS_BYTES``: the largest workflow description (UTF-8 JSON) the server
  registers; a larger one is refused with ``InvalidRequest``. Fan-out
  templates keep real workflows far below it (thousands of functions fit in
  a few hundred KB even when listed one by one). It is the ceiling of the
  settable WDS size limit (``wds_max_bytes``, default 4 MiB), which the
  server applies first.
- ``DEFAULT_MAX_FRAME_BYTES``: the largest request frame the server reads, by
  default Thrift's own frame limit (which is also what ``MetadataClient``
  accepts for a reply). It is a server setting (``funcsion serve metadata
  --max-frame-bytes``, ``MetadataServer(max_frame_bytes=...)``) of at least
  ``MIN_MAX_FRAME_BYTES``, so a register call with the largest WDS always fits.
  A larger frame is refused before its body is read.
- ``HANDSHAKE_BYTES``: how much of a frame the server holds before it has
  checked the frame's token. A frame longer than this is admitted only once
  its header (method, token, run id) has passed the token check; a refused
  one is answered with the fault and its body discarded as it arrives, so an
  unauthenticated peer costs the server no more memory than this.

Imports only the standard library.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "HANDSHAKE_BYTES", "MAX_WDS_BYTES", "MIN_MAX_FRAME_BYTES"]

MAX_WDS_BYTES = 8 << 20
DEFAULT_MAX_FRAME_BYTES = 16_384_000
MIN_MAX_FRAME_BYTES = MAX_WDS_BYTES + (64 << 10)
HANDSHAKE_BYTES = 16 << 10
