"""moto's S3 server in a process of its own, on loopback, for the benchmarks.

S3 is a service apart from the daemon: a moto server running as a thread of
the benchmark's process would take the daemon's interpreter lock for every
request it parses (a recovery's downloads stall the GETs being timed), which
is no property of S3. ``MotoS3`` starts ``python -m moto.server`` on a free
port, waits until it answers, hands out a fresh bucket per ``url()`` and stops
the process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

__all__ = ["MotoS3", "CREDS"]

#: dummy credentials every S3 client of the benchmark (and its child processes) signs with
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoS3:
    """``MotoS3()`` starts the server; ``url()`` -> ``s3://bucket/prefix?endpoint_url=...``."""

    def __init__(self, *, prefix: str = "sion", start_timeout_s: float = 60.0) -> None:
        os.environ.update(CREDS)  # the storage functions (child processes) sign their reads too
        self.prefix = prefix
        port = _free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ),
                                     preexec_fn=(lambda: os.nice(int(os.environ.get("MNICE","0")))))
        deadline = time.monotonic() + start_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto's S3 server exited at start (code {self.proc.returncode}); "
                                   "is moto[server] installed? (pip install -e '.[all]')")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto's S3 server did not listen on port {port} within "
                                       f"{start_timeout_s:g} s") from None
                time.sleep(0.05)  # polling a port that is not open yet: nothing to wait on
        self.n = 0

    def url(self) -> str:
        import boto3

        self.n += 1
        bucket = f"bench-{os.getpid()}-{self.n}"
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        return f"s3://{bucket}/{self.prefix}?endpoint_url={self.endpoint}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> MotoS3:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
