"""Names of every environment variable funcsion reads, in one place.

Configuration fields map to ``FUNCSION_<FIELD>`` (upper case); the others are
below. The local platform's own variables live in
``storage_functions.local._config.ENV`` (storage_functions cannot import sdk);
``sdk.cli._env`` joins both to warn about ``FUNCSION_*`` names nobody reads.
"""

from __future__ import annotations

__all__ = ["ENV_PREFIX", "CONFIG_FILE", "ENV_RUN_ID", "ENV_RUN_TOKEN", "ENV_METADATA", "ENV_DAEMON",
           "ENV_ADMIN_TOKEN", "ENV_STORE_TOKEN", "ENV_METADATA_JOURNAL", "ENV_METADATA_MAX_FRAME_BYTES", "ENV_WORKFLOW", "ENV_SKIP_INSTALL", "EVENT_KEY",
           "ENV_TLS_CERT", "ENV_TLS_KEY", "ENV_TLS_CA"]

ENV_PREFIX = "FUNCSION_"
CONFIG_FILE = "funcsion.toml"

ENV_RUN_ID = "FUNCSION_RUN_ID"
ENV_RUN_TOKEN = "FUNCSION_RUN_TOKEN"
ENV_METADATA = "FUNCSION_METADATA_ADDR"
ENV_DAEMON = "FUNCSION_DAEMON_ADDR"

#: ``funcsion serve metadata``: the admin token (a secret, so not a config field) and the journal
ENV_ADMIN_TOKEN = "FUNCSION_ADMIN_TOKEN"
ENV_METADATA_JOURNAL = "FUNCSION_METADATA_JOURNAL"
ENV_METADATA_MAX_FRAME_BYTES = "FUNCSION_METADATA_MAX_FRAME_BYTES"
#: ``funcsion serve metadata|daemon --tls-cert/--tls-key/--tls-ca`` (the config fields tls_cert,
#: tls_key, tls_ca): the server's certificate chain and key, the deployment's CA (PEM files)
ENV_TLS_CERT = "FUNCSION_TLS_CERT"
ENV_TLS_KEY = "FUNCSION_TLS_KEY"
ENV_TLS_CA = "FUNCSION_TLS_CA"
#: ``funcsion run --stack metadata=...,daemon=...``: the daemon's store token (``serve daemon`` prints it)
ENV_STORE_TOKEN = "FUNCSION_STORE_TOKEN"
#: set on every task Lambda by ``funcsion deploy WDS --target aws``: the workflow key
ENV_WORKFLOW = "FUNCSION_WORKFLOW"
#: read by ``scripts/test``: skip its install step
ENV_SKIP_INSTALL = "FUNCSION_SKIP_INSTALL"

#: Key under which a task's event carries its run context.
EVENT_KEY = "funcsion"
