"""``open_cos(url)``: pick a COS backend from a URL.

- ``file:///abs/dir`` (or a bare absolute path): ``LocalCOS``; ``?fsync=1``.
- ``s3://bucket/prefix``: ``S3COS``; ``?endpoint_url=http://127.0.0.1:5000``
  and ``?region=eu-west-1`` in the URL, or ``endpoint_url=``/``region_name=``
  keyword options (a keyword beats the URL).

Every adapter's ``url`` opens the same store again, so the URL is what a
storage function receives in its event.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ..exceptions import COSConfigError
from ._base import COS

__all__ = ["open_cos"]

_TRUE = {"1", "true", "yes", "on"}


def open_cos(url: str, *, client: Any = None, **opts: Any) -> COS:
    """Open the COS at ``url``. ``client`` (S3 only) is a boto3 S3 client;
    other keyword options go to the backend (``LocalCOS``/``S3COS``) and to
    the base (``retry``, ``sleep``, ``clock``, ``rng``)."""
    if not isinstance(url, str) or not url:
        raise COSConfigError(f"COS URL must be a non-empty str like 'file:///tmp/cos' or 's3://bucket/prefix', got {url!r}")
    if url.startswith("/"):
        url = "file://" + url
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    if parts.scheme == "file":
        from ._local import LocalCOS

        if parts.netloc not in ("", "localhost"):
            raise COSConfigError(f"COS URL {url!r}: a file URL names a local absolute path, 'file:///abs/dir'")
        unknown = set(query) - {"fsync"}
        if unknown:
            raise COSConfigError(f"COS URL {url!r}: unknown option(s) {sorted(unknown)}; a file URL takes 'fsync'")
        if client is not None:
            raise COSConfigError(f"COS URL {url!r}: a client is only for s3:// URLs")
        if "fsync" in query:
            opts.setdefault("fsync", query["fsync"].lower() in _TRUE)
        path = unquote(parts.path)
        if not os.path.isabs(path):
            raise COSConfigError(f"COS URL {url!r}: the path must be absolute")
        return LocalCOS(path, **opts)
    if parts.scheme == "s3":
        from ._s3 import S3COS

        unknown = set(query) - {"endpoint_url", "region"}
        if unknown:
            raise COSConfigError(f"COS URL {url!r}: unknown option(s) {sorted(unknown)}; an s3 URL takes "
                                 "'endpoint_url' and 'region'")
        if not parts.netloc:
            raise COSConfigError(f"COS URL {url!r}: name a bucket, 's3://bucket/prefix'")
        if "endpoint_url" in query:
            opts.setdefault("endpoint_url", query["endpoint_url"])
        if "region" in query:
            opts.setdefault("region_name", query["region"])
        return S3COS(parts.netloc, unquote(parts.path), client=client, **opts)
    raise COSConfigError(f"COS URL {url!r}: unknown scheme {parts.scheme!r}; use file:///abs/dir or s3://bucket/prefix")
