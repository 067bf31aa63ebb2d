"""What users import: ``sdk.put`` / ``sdk.get``, the ``@sdk.task`` handler
decorator, client-side erasure coding, the Step Functions bridge, the local
workflow executor and the ``funcsion`` CLI (``sdk.cli``, not imported here so a
Lambda deployment never loads networkx or server code).
"""

from __future__ import annotations

from wds import FuncsionError

__all__ = ["FuncsionError"]
