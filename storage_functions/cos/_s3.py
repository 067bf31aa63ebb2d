"""COS in an S3 bucket (or anything that speaks S3: moto, MinIO) via boto3.

Keys live under ``prefix`` in ``bucket``; ``list`` returns them without it.
boto3 is imported only when this backend builds its own client. A client
built here has botocore's retries off (one attempt per call): the base
class's ``RetryPolicy`` owns retrying. A client passed in is used as is.
Not here: retries and counters (``_base.py``), URL parsing (``_open.py``).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote, urlencode

from ..exceptions import COSConfigError, COSNotFound
from ._base import COS

__all__ = ["S3COS"]

_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_TRANSIENT_CODES = {
    "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed",
    "InternalError", "ServiceUnavailable", "503", "500", "502", "504", "RequestLimitExceeded",
}


class S3COS(COS):
    """COS in ``s3://bucket/prefix``. ``client`` is a boto3 S3 client; with
    ``client=None`` one is built from ``endpoint_url``/``region_name`` and the
    usual AWS credential chain. ``create_bucket=True`` creates a missing bucket."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        create_bucket: bool = False,
        **base: Any,
    ) -> None:
        super().__init__(**base)
        if not bucket or "/" in bucket:
            raise COSConfigError(f"S3 bucket name {bucket!r} is empty or holds '/'")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        self.region_name = region_name
        self._owns_client = client is None
        if client is None:
            client = _build_client(endpoint_url, region_name)
        self.client = client
        from botocore.exceptions import BotoCoreError, ClientError  # boto3 is here: botocore is too

        self._client_error = ClientError
        self._boto_error = BotoCoreError
        query = {k: v for k, v in (("endpoint_url", endpoint_url), ("region", region_name)) if v}
        self.url = f"s3://{bucket}/{quote(self.prefix.rstrip('/'))}" + (f"?{urlencode(query)}" if query else "")
        if create_bucket:
            self._ensure_bucket()

    def _ensure_bucket(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except self._client_error:
            kwargs: dict[str, Any] = {"Bucket": self.bucket}
            region = self.client.meta.region_name
            if region and region != "us-east-1":
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
            self.client.create_bucket(**kwargs)

    def _code(self, exc: BaseException) -> str:
        if isinstance(exc, self._client_error):
            err = exc.response.get("Error", {})
            return str(err.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        return ""

    def _not_found(self, key: str, exc: BaseException) -> COSNotFound | None:
        if self._code(exc) in _NOT_FOUND:
            return COSNotFound(f"no key {key!r} in {self.url}")
        return None

    def _put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        body = data if isinstance(data, bytes) else bytes(data)
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=body)

    def _put_file(self, key: str, path: str, offset: int, length: int) -> None:
        """A whole file goes up with boto3's ``upload_file`` (multipart from the file past its
        threshold, no copy in memory); a range as one ``put_object`` of the range."""
        if offset == 0 and os.path.getsize(path) == length and hasattr(self.client, "upload_file"):
            self.client.upload_file(path, self.bucket, self.prefix + key)
            return
        super()._put_file(key, path, offset, length)

    def _get(self, key: str) -> bytes:
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
        except self._client_error as exc:
            nf = self._not_found(key, exc)
            if nf:
                raise nf from None
            raise
        with resp["Body"] as body:
            data: bytes = body.read()
        return data

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        if length == 0:
            if not self._exists(key):
                raise COSNotFound(f"no key {key!r} in {self.url}")
            return b""
        try:
            resp = self.client.get_object(
                Bucket=self.bucket, Key=self.prefix + key, Range=f"bytes={start}-{start + length - 1}"
            )
        except self._client_error as exc:
            nf = self._not_found(key, exc)
            if nf:
                raise nf from None
            if self._code(exc) in ("InvalidRange", "416"):  # start at or past the end
                return b""
            raise
        with resp["Body"] as body:
            data: bytes = body.read()
        return data[:length]

    def _delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)

    def _delete_many(self, keys: list[str]) -> int:
        for i in range(0, len(keys), 1000):
            batch = keys[i : i + 1000]
            resp = self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": self.prefix + k} for k in batch], "Quiet": True},
            )
            errors = resp.get("Errors") or []
            if errors:
                first = errors[0]
                raise OSError(f"{len(errors)} of {len(batch)} deletes failed, e.g. {first.get('Key')!r}: "
                              f"{first.get('Code')} {first.get('Message')}")
        return len(keys)

    def _list(self, prefix: str) -> list[str]:
        out: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        cut = len(self.prefix)
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
            out.extend(obj["Key"][cut:] for obj in page.get("Contents", ()))
        return out

    def _exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self.prefix + key)
        except self._client_error as exc:
            if self._code(exc) in _NOT_FOUND:
                return False
            raise
        return True

    def _is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, self._client_error):
            return self._code(exc) in _TRANSIENT_CODES
        # connection resets, read timeouts, endpoint unreachable
        return isinstance(exc, self._boto_error) and type(exc).__name__ in {
            "EndpointConnectionError", "ConnectionClosedError", "ReadTimeoutError",
            "ConnectTimeoutError", "ResponseStreamingError", "IncompleteReadError",
        }

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if self._owns_client and close is not None:
            close()


def _build_client(endpoint_url: str | None, region_name: str | None) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - boto3 is a dev/aws extra
        raise COSConfigError("S3 COS needs boto3: pip install 'funcsion[aws]'") from exc
    return boto3.client(
        "s3", endpoint_url=endpoint_url, region_name=region_name,
        config=Config(retries={"total_max_attempts": 1}),
    )
