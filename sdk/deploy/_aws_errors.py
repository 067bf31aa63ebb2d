"""botocore's errors as one line a user can act on: what was being done, what
went wrong, and how to fix it (credentials, region, endpoint, permissions).
``describe_aws_error`` is pure (it reads the exception's class name and
fields; botocore is not imported here), so deploy, the daemon and the CLI
can share it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["describe_aws_error", "is_aws_error"]

_CREDENTIALS = ("no AWS credentials found: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), "
                "or run `aws configure`")
_CLIENT_HINTS = {
    "ExpiredToken": "your AWS session token expired: refresh your credentials (e.g. `aws sso login`)",
    "ExpiredTokenException": "your AWS session token expired: refresh your credentials (e.g. `aws sso login`)",
    "InvalidClientTokenId": "AWS does not know these credentials: check AWS_PROFILE / AWS_ACCESS_KEY_ID",
    "UnrecognizedClientException": "AWS does not know these credentials: check AWS_PROFILE / AWS_ACCESS_KEY_ID",
    "SignatureDoesNotMatch": "the AWS secret key does not match the access key: check AWS_SECRET_ACCESS_KEY",
    "AccessDenied": "the caller lacks an IAM permission for this call (the message names it)",
    "AccessDeniedException": "the caller lacks an IAM permission for this call (the message names it)",
}


def is_aws_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of botocore's (or boto3's) errors."""
    return type(exc).__module__.split(".")[0] in ("botocore", "boto3")


def describe_aws_error(exc: BaseException, *, region: str | None = None, endpoint_url: str | None = None) -> str:
    """One line for a botocore error (see the module docstring)."""
    name = type(exc).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
        return f"{_CREDENTIALS} ({name}: {exc})" if name != "NoCredentialsError" else _CREDENTIALS
    if name == "NoRegionError":
        return "no AWS region: give --region, or set region in funcsion.toml (FUNCSION_REGION) or AWS_DEFAULT_REGION"
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
                "ProxyConnectionError", "SSLError"):
        where = getattr(exc, "kwargs", {}).get("endpoint_url") or endpoint_url or "the AWS endpoint"
        what = {"ConnectTimeoutError": "timed out connecting to", "ReadTimeoutError": "timed out waiting for",
                "SSLError": "TLS failed with", "ProxyConnectionError": "the proxy cannot reach"}.get(name,
                                                                                            "cannot reach")
        return (f"{what} {where}: check the region{f' ({region})' if region else ''}, the network or proxy, "
                "and --endpoint-url / AWS_ENDPOINT_URL if you set one")
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:  # ClientError and its modeled subclasses
        err: dict[str, Any] = response["Error"]
        code, message = err.get("Code", "?"), err.get("Message", "")
        op = getattr(exc, "operation_name", "")
        hint = _CLIENT_HINTS.get(code)
        return f"AWS refused {op or 'the call'}: {code}: {message}" + (f" ({hint})" if hint else "")
    if name == "ParamValidationError":
        return f"AWS would refuse the request's parameters: {' '.join(str(exc).split())}"
    return f"AWS: {name}: {' '.join(str(exc).split())}"
