"""A real S3 API on loopback: moto's server mode (`python -m moto.server`) in a child process.

boto3 talks to it over HTTP exactly as it would to S3 or R2, so what is tested is the real
wire format, signing and error codes, not a patched client.

    with MotoS3() as s3:
        s3.create_bucket("uploads")
        env = s3.env  # AWS_* variables that point boto3 at fake credentials
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests import pace, reaper
from tests.support import free_port

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "moto-test-key",
    "AWS_SECRET_ACCESS_KEY": "moto-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    # No profile or file from the machine may change what the tests run with.
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


class MotoUnavailable(RuntimeError):
    """moto's server could not be started here."""


class MotoS3:
    def __init__(self, log_dir: Path, *, timeout: float = 30.0):
        self.port = free_port()
        self.timeout = timeout
        self.log_path = log_dir / "moto.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return dict(CREDENTIALS)

    def __enter__(self) -> "MotoS3":
        if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
            raise MotoUnavailable("moto[server] is not installed (pip install 'moto[server]')")
        with open(self.log_path, "ab") as log:
            self.proc = reaper.spawn([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **CREDENTIALS})
        deadline = pace.Deadline(self.timeout)
        while not deadline.expired():
            if self.proc.poll() is not None:
                raise MotoUnavailable(f"moto.server exited with {self.proc.returncode}: {self.log()[-2000:]}")
            try:
                with urllib.request.urlopen(self.endpoint_url + "/moto-api/", timeout=pace.scaled(2)):
                    return self
            except OSError:
                time.sleep(0.1)
        self.__exit__()
        raise MotoUnavailable(f"moto.server did not answer within {deadline.elapsed():.0f} s: {self.log()[-2000:]}")

    def __exit__(self, *exc_info: object) -> None:
        if self.proc is not None:
            reaper.end(self.proc)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self) -> Any:
        """A boto3 S3 client on this server, with the fake credentials."""
        import boto3

        session = boto3.session.Session(aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                                        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                                        region_name=CREDENTIALS["AWS_DEFAULT_REGION"])
        return session.client("s3", endpoint_url=self.endpoint_url)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)
