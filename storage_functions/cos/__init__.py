"""COS adapters: the durable object store behind the storage functions.

One base class ``COS`` (key validation, retries with backoff, counters) and
two thin backends: ``LocalCOS`` (a directory, the embedded default) and
``S3COS`` (boto3, any endpoint). ``open_cos(url)`` picks one from a URL.
"""

from __future__ import annotations

from ._base import COS, MAX_KEY_BYTES, COSStats, validate_key
from ._local import LocalCOS
from ._open import open_cos
from ._retry import RetryPolicy
from ._s3 import S3COS

__all__ = ["COS", "COSStats", "LocalCOS", "S3COS", "RetryPolicy", "open_cos", "validate_key", "MAX_KEY_BYTES"]
