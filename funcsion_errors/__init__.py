"""The root of every error funcsion raises on purpose.

Standard library only and imported by every package, ``storage_functions``
(which runs inside storage Lambdas) included, so that one
``except FuncsionError`` catches whatever any part of funcsion raised.
Each package draws its own part of the tree in its ``exceptions`` module::

    FuncsionError
    ├── WDSError                a workflow description cannot be used      (wds.exceptions)
    ├── MetadataError           the metadata service refused               (funcsion_rpc.errors)
    ├── StorageError            COS, the Lambda platform, the data path    (storage_functions.exceptions)
    └── StoreFailure, TaskError, CodecError, ConfigError, ...             (sdk.exceptions)

Not here: anything else. A Lambda zip carries this package next to the
others, so it must stay this small.
"""

from __future__ import annotations

__all__ = ["FuncsionError"]


class FuncsionError(Exception):
    """Root of every error funcsion raises on purpose."""
