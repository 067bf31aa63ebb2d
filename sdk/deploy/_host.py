"""The server host of a stack: what an EC2 instance runs at boot (user data),
as a CloudFormation ``Fn::Base64``/``Fn::Sub`` value.

The script installs funcsion in a virtualenv (``ServerPackage``, a pip
requirement), reads the TLS material and the tokens from their Secrets
Manager secrets with the instance role (files mode 0600, never in the
template or the instance's user data), and starts ``funcsion serve
metadata`` and ``funcsion serve daemon --invoker aws`` as systemd units that
restart on failure, their output shipped to the ``ServerLogs`` log group by the
CloudWatch agent; the metadata journal and the daemon's persistent buffer
live on the instance's disk (``/var/lib/funcsion``). Why EC2 rather than
Fargate: the buffer wants a local disk that outlives a process restart, and
the Lambdas dial one stable private address (the Route 53 record of
``ServerName``).

Pure: strings only. Not here: the instance, its role and its security group
(``_template``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["LOG_DIR", "VENV", "STATE_DIR", "TLS_DIR", "daemon_command", "metadata_command", "user_data"]

VENV = "/opt/funcsion"
STATE_DIR = "/var/lib/funcsion"
TLS_DIR = "/etc/funcsion/tls"
LOG_DIR = "/var/log/funcsion"
_TOKENS_ENV = "/etc/funcsion/tokens.env"


def metadata_command(port: int) -> str:
    """The metadata server's command line (``${...}``: CloudFormation substitutions)."""
    return (f"{VENV}/bin/funcsion serve metadata --host 0.0.0.0 --port {port} "
            f"--journal {STATE_DIR}/metadata.journal --advertise ${{ServerName}} "
            f"--tls-cert {TLS_DIR}/server.pem --tls-key {TLS_DIR}/server.key --tls-ca {TLS_DIR}/ca.pem")


def daemon_command(*, metadata_port: int, daemon_port: int, function_prefix: str) -> str:
    """The daemon's command line. ``${!FUNCSION_STORE_TOKEN}`` is systemd's ``${FUNCSION_STORE_TOKEN}``
    (from the tokens' environment file) once ``Fn::Sub`` has run."""
    return (f"{VENV}/bin/funcsion serve daemon --invoker aws --host 0.0.0.0 --port {daemon_port} "
            f"--metadata 127.0.0.1:{metadata_port} --advertise ${{ServerName}}:{daemon_port} "
            "--cos s3://${CosBucket}/${CosPrefix} --region ${AWS::Region} "
            f"--function-prefix {function_prefix} --function-memory-mb ${{StorageMemoryMb}} "
            f"--root {STATE_DIR}/daemon --token ${{!FUNCSION_STORE_TOKEN}} "
            f"--tls-cert {TLS_DIR}/server.pem --tls-key {TLS_DIR}/server.key --tls-ca {TLS_DIR}/ca.pem")


def _unit(name: str, description: str, command: str, after: str = "network-online.target") -> str:
    return f"""cat > /etc/systemd/system/{name}.service <<'UNIT'
[Unit]
Description={description}
Wants=network-online.target
After={after}

[Service]
EnvironmentFile={_TOKENS_ENV}
ExecStart={command}
StandardOutput=append:{LOG_DIR}/{name}.log
StandardError=inherit
Restart=always
RestartSec=2
User=funcsion
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
UNIT
"""


_SECRETS = f"""{VENV}/bin/python - <<'PY'
import base64, json, os, subprocess

def secret(arn):
    out = subprocess.run(["aws", "secretsmanager", "get-secret-value", "--region", "${{AWS::Region}}",
                          "--secret-id", arn, "--query", "SecretString", "--output", "text"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)

def write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)

tls = secret("${{TlsSecret}}")
for name, key in (("ca.pem", "ca_cert"), ("server.pem", "server_cert"), ("server.key", "server_key")):
    write("{TLS_DIR}/" + name, base64.b64decode(tls[key]).decode())
tokens = secret("${{TokensSecret}}")
write("{_TOKENS_ENV}", "FUNCSION_ADMIN_TOKEN=%s\\nFUNCSION_STORE_TOKEN=%s\\n"
      % (tokens["admin_token"], tokens["store_token"]))
PY
"""


_AGENT = f"""cat > /opt/aws/amazon-cloudwatch-agent/etc/funcsion.json <<'AGENT'
{{"logs": {{"logs_collected": {{"files": {{"collect_list": [
  {{"file_path": "{LOG_DIR}/funcsion-metadata.log", "log_group_name": "${{ServerLogs}}", "log_stream_name": "{{instance_id}}/metadata"}},
  {{"file_path": "{LOG_DIR}/funcsion-daemon.log", "log_group_name": "${{ServerLogs}}", "log_stream_name": "{{instance_id}}/daemon"}}
]}}}}}}}}
AGENT
/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s \\
  -c file:/opt/aws/amazon-cloudwatch-agent/etc/funcsion.json
"""


def user_data(*, metadata_port: int, daemon_port: int, function_prefix: str) -> dict[str, Any]:
    """The instance's ``UserData`` property."""
    script = "\n".join([
        "#!/bin/bash",
        "set -euo pipefail",
        "dnf install -y python3.12 python3.12-pip amazon-cloudwatch-agent",
        "id funcsion >/dev/null 2>&1 || useradd --system --home-dir /var/lib/funcsion --shell /sbin/nologin funcsion",
        f"install -d -m 0750 -o funcsion -g funcsion {STATE_DIR} {STATE_DIR}/daemon {LOG_DIR}",
        f"install -d -m 0750 -o root -g funcsion /etc/funcsion {TLS_DIR}",
        f"python3.12 -m venv {VENV}",
        f"{VENV}/bin/pip install --quiet '${{ServerPackage}}'",
        _SECRETS,
        f"chown root:funcsion {TLS_DIR}/* {_TOKENS_ENV} && chmod 0640 {TLS_DIR}/* {_TOKENS_ENV}",
        _unit("funcsion-metadata", "funcsion metadata server", metadata_command(metadata_port)),
        _unit("funcsion-daemon", "funcsion storage daemon (SION, AWS Lambda storage functions)",
              daemon_command(metadata_port=metadata_port, daemon_port=daemon_port, function_prefix=function_prefix),
              after="network-online.target funcsion-metadata.service"),
        "systemctl daemon-reload",
        "systemctl enable --now funcsion-metadata.service funcsion-daemon.service",
        _AGENT,
        "",
    ])
    return {"Fn::Base64": {"Fn::Sub": script}}
