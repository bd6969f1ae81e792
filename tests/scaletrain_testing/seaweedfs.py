"""A real S3-compatible object store for the tests: SeaweedFS's `weed server` (built by `make control-plane` into
the control plane's binaries) on loopback, with its master, volume server, filer and S3 gateway in one process.

    with SeaweedS3(tmp_path) as s3:
        s3.make_bucket("checkpoints")
        s3.filesystem().pipe("checkpoints/a", b"...")  # s3fs, as the trainer reads and writes it
        env = s3.env()  # AWS_ENDPOINT_URL, AWS_REGION and the admin key, for a process of the test's

Two identities: the admin (every action) and a read-only one (Read, List), whose writes SeaweedFS refuses with
AccessDenied. stop() kills the server at once (SIGKILL: it ignores SIGTERM for longer than a test can wait), and
start() brings it back on the same ports and data, so that a test can take the store away in the middle of a save.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from pathlib import Path
from typing import Any, Self

import botocore.session
import s3fs
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from scaletrain_trainer.contract.wire import S3_ACCESS_KEY_ENV, S3_ENDPOINT_ENV, S3_REGION_ENV, S3_SECRET_KEY_ENV

from .control_plane import binaries_dir, free_ports, launch
from .waiting import WaitTimeout, wait_until

REGION = "us-east-1"
LOOPBACK = "127.0.0.1"
# From the start to the first answered S3 request: 4-8 s on an idle machine (the master's election, the volume
# server's and the filer's registration), more on a loaded one.
START_S = 60.0
# The process gone after SIGKILL.
STOP_S = 10.0
# One readiness request: answered within milliseconds once the gateway listens.
REQUEST_S = 5.0
LOG_TAIL_LINES = 40
WARM_UP_BUCKET = "scaletrain-warm-up"
# Each master-managed volume is capped small, so that a bucket (a collection of volumes of its own) does not ask
# for the default 30 GB ones; with -volume.max=0 the volume server then allows as many as the disk holds.
VOLUME_SIZE_LIMIT_MB = 64
# Every listener named: SeaweedFS's default for a gRPC port is its HTTP port + 10000, which may be taken.
PORT_FLAGS = tuple(f"{server}.port{grpc}" for server in ("master", "volume", "filer", "s3") for grpc in ("", ".grpc"))


def weed_path() -> Path:
    return binaries_dir() / "weed"


def unavailable_reason() -> str | None:
    """One line saying why the S3 server cannot run here, or None when it can."""
    if not os.access(weed_path(), os.X_OK):
        return f"weed (SeaweedFS) missing in {weed_path().parent}: run `make control-plane`"
    return None


class SeaweedS3:
    """`weed server -s3` with its data in `directory` (see the module's docstring), listening on `address`:
    loopback, or the address a kubelet stand-in's pods reach this machine at (its network's host_ip)."""

    def __init__(self, directory: Path, address: str = LOOPBACK):
        self.directory, self.address = directory, address
        self.ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS)), strict=True))
        self.endpoint = f"http://{address}:{self.ports['s3.port']}"
        self.region = REGION
        self.access_key, self.secret_key = f"admin-{secrets.token_hex(4)}", secrets.token_hex(16)
        self.read_only_access_key, self.read_only_secret_key = f"reader-{secrets.token_hex(4)}", secrets.token_hex(16)
        self.log_path = directory / "weed.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server (again, on the same ports and data after stop()) and wait until it stores the
        admin's writes: about 10 s, most of it the master's hold on new volume ids (_warm_up), 12 s for a
        restart. RuntimeError with the log's tail if it exits or does not answer in START_S."""
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        identities = self.directory / "identities.json"
        identities.write_text(json.dumps(self._identities()))
        command = [
            str(weed_path()),
            "server",
            f"-dir={self.directory / 'data'}",
            f"-ip={self.address}",
            f"-ip.bind={self.address}",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
            "-s3",
            f"-s3.config={identities}",
            "-s3.port.iceberg=0",  # the Iceberg and Lance catalogs' listeners, which no test uses
            "-s3.port.lance=0",
            f"-filer.localSocket={self.directory / 'filer.sock'}",  # not in /tmp, where other servers' are
            f"-s3.localSocket={self.directory / 's3.sock'}",
            f"-master.volumeSizeLimitMB={VOLUME_SIZE_LIMIT_MB}",
            "-volume.max=0",
            "-volume.preStopSeconds=0",
            "-master.telemetry=false",
        ]
        self._process = launch(self.directory, "weed", command, detached=False)
        try:
            wait_until(self._answers, START_S, f"SeaweedFS's S3 gateway at {self.endpoint}", interval_s=0.2)
            self._warm_up()
        except (WaitTimeout, RuntimeError, BotoCoreError, ClientError) as error:
            self.stop()
            raise RuntimeError(f"{error}\n{self.log_tail()}") from None

    def stop(self) -> None:
        """Kill the server's process group and wait for it; its data stays for start()."""
        if self._process is None:
            return
        try:
            os.killpg(self._process.pid, signal.SIGKILL)
        except ProcessLookupError:  # gone already
            pass
        self._process.wait(STOP_S)
        self._process = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def env(self, read_only: bool = False) -> dict[str, str]:
        """The AWS SDKs' variables for a process that uses this store: the admin's key, or the read-only one's."""
        key, secret = self.credentials(read_only)
        return {
            S3_ENDPOINT_ENV: self.endpoint,
            S3_REGION_ENV: self.region,
            S3_ACCESS_KEY_ENV: key,
            S3_SECRET_KEY_ENV: secret,
        }

    def credentials(self, read_only: bool = False) -> tuple[str, str]:
        """(access key, secret key) of the admin, or of the read-only identity."""
        if read_only:
            return self.read_only_access_key, self.read_only_secret_key
        return self.access_key, self.secret_key

    def filesystem(self, access_key: str | None = None, secret_key: str | None = None) -> s3fs.S3FileSystem:
        """An s3fs filesystem on this store, with the admin's key unless others are given; a fresh instance,
        with no listings cache, so that it sees what others wrote and a restarted server."""
        return s3fs.S3FileSystem(
            key=access_key or self.access_key,
            secret=secret_key or self.secret_key,
            endpoint_url=self.endpoint,
            client_kwargs={"region_name": self.region},
            config_kwargs={"s3": {"addressing_style": "path"}},
            skip_instance_cache=True,
            use_listings_cache=False,
        )

    def make_bucket(self, name: str) -> str:
        """Create bucket `name` (3 to 63 characters: lowercase letters, digits, '-' and '.'); its name."""
        self.client().create_bucket(Bucket=name)
        return name

    def client(
        self, access_key: str | None = None, secret_key: str | None = None, read_timeout_s: float = REQUEST_S
    ) -> Any:
        """A botocore S3 client on this store, with the admin's key unless others are given, that fails at once
        instead of retrying (s3fs retries a refused connection for about 10 s)."""
        config = Config(
            s3={"addressing_style": "path"},
            connect_timeout=REQUEST_S,
            read_timeout=read_timeout_s,
            retries={"total_max_attempts": 1},
        )
        return botocore.session.get_session().create_client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            config=config,
        )

    def log_tail(self) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines() if self.log_path.exists() else []
        return f"the last {LOG_TAIL_LINES} lines of {self.log_path}:\n" + "\n".join(lines[-LOG_TAIL_LINES:])

    def _identities(self) -> dict[str, Any]:
        """The S3 gateway's identities (its -s3.config file)."""
        return {
            "identities": [
                {
                    "name": "admin",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                },
                {
                    "name": "reader",
                    "credentials": [{"accessKey": self.read_only_access_key, "secretKey": self.read_only_secret_key}],
                    "actions": ["Read", "List"],
                },
            ]
        }

    def _answers(self) -> bool:
        """Whether the gateway answers the admin's ListBuckets; RuntimeError if the server has exited."""
        assert self._process is not None
        if self._process.poll() is not None:
            raise RuntimeError(f"weed server exited with {self._process.returncode}")
        try:
            self.client().list_buckets()
        except (BotoCoreError, ClientError):  # not listening yet, or the filer not yet registered
            return False
        return True

    def _warm_up(self) -> None:
        """Write an object, in a bucket of its own that goes again. The first write after a start waits for
        the master's hold on new volume ids (5-8 s: a heartbeat pulse and then some): here, rather than in a
        test's first save."""
        client = self.client(read_timeout_s=START_S)
        client.create_bucket(Bucket=WARM_UP_BUCKET)
        client.put_object(Bucket=WARM_UP_BUCKET, Key="warm-up", Body=b"")
        client.delete_object(Bucket=WARM_UP_BUCKET, Key="warm-up")
        client.delete_bucket(Bucket=WARM_UP_BUCKET)
