"""The COS probe's one-line errors (``storage_functions.daemon._aws.probe_error``): each
botocore failure the daemon's start can meet names the bucket/prefix, the action and the fix."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from storage_functions.daemon._aws import probe_error


def _client_error(code: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "PutObject")


@pytest.mark.parametrize("exc,action,want", [
    (_client_error("NoSuchBucket", "The specified bucket does not exist"), "s3:PutObject",
     "COS s3://b/p/: bucket 'b' does not exist (s3:PutObject said NoSuchBucket): create it (aws s3 mb s3://b)"),
    (_client_error("AccessDenied", "Access Denied"), "s3:DeleteObject",
     "COS s3://b/p/: s3:DeleteObject was denied (AccessDenied: Access Denied): give the server's role "
     "s3:PutObject, s3:GetObject and s3:DeleteObject on arn:aws:s3:::b/p/*"),
    (_client_error("ExpiredToken", "The provided token has expired."), "s3:PutObject",
     "COS s3://b/p/: S3 refused the server's credentials on s3:PutObject (ExpiredToken: The provided token has "
     "expired): run the server with a role"),
    (NoCredentialsError(), "s3:PutObject", "COS s3://b/p/: no AWS credentials for s3:PutObject (NoCredentialsError)"),
    (EndpointConnectionError(endpoint_url="http://10.0.0.9:9000/b"), "s3:GetObject",
     "COS s3://b/p/: S3 is not reachable at http://10.0.0.9:9000 (EndpointConnectionError on s3:GetObject)"),
    (_client_error("InternalError", "We encountered an internal error"), "s3:GetObject",
     "COS s3://b/p/: s3:GetObject failed (InternalError: We encountered an internal error); the server's role"),
])
def test_probe_errors_are_one_line_naming_the_fix(exc: BaseException, action: str, want: str) -> None:
    line = probe_error("b", "p/", action, exc, endpoint="http://10.0.0.9:9000")
    assert line.startswith(want) and "\n" not in line, line
