"""Names of every environment variable funcsion reads, in one place.

Configuration fields map to ``FUNCSION_<FIELD>`` (upper case); the run context
variables below are set by the executor and Step Functions bridge for tasks.
"""

from __future__ import annotations

__all__ = ["ENV_PREFIX", "CONFIG_FILE", "ENV_RUN_ID", "ENV_RUN_TOKEN", "ENV_METADATA", "ENV_DAEMON",
           "EVENT_KEY"]

ENV_PREFIX = "FUNCSION_"
CONFIG_FILE = "funcsion.toml"

ENV_RUN_ID = "FUNCSION_RUN_ID"
ENV_RUN_TOKEN = "FUNCSION_RUN_TOKEN"
ENV_METADATA = "FUNCSION_METADATA_ADDR"
ENV_DAEMON = "FUNCSION_DAEMON_ADDR"

#: Key under which a task's event carries its run context.
EVENT_KEY = "funcsion"
