"""The metadata service's wire layer, shared by the server and the SDK: the
Python code the Thrift compiler generates from ``metadata_server/metadata.thrift``
and the error codes. Imports only ``thrift`` and ``wds``, so the SDK can carry
it into a Lambda without the server. Not yet built."""

from __future__ import annotations

__all__: list[str] = []
