"""Object stores (S3 and S3-compatible ones; any other fsspec URL the same way) as the trainer uses them.

Where the store is and who the trainer is come from the AWS SDKs' own environment (contract/wire.py:
AWS_ENDPOINT_URL, AWS_REGION, the keys from spec.objectStorage's Secret, or else the pod's own identity), so
that a script of one's own, boto3 and the AWS CLI read the same.

Each request is retried by botocore (its "standard" mode: 5xx answers, throttling, reset or refused
connections, with exponential backoff and jitter) up to ATTEMPTS times, so that one failing request costs
at most about 70 s; what still fails is raised, and the checkpoint manager makes it a write error. A
refusal (a wrong key, no bucket, no right to write) is not retried.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs

from ..contract import wire
from ..contract.exit_codes import CheckpointStorageError, causes

# Tries of one request, the first included, and its time limits. botocore waits a random share of 1, 2, 4, 8,
# 16, 20, 20 s between them: a store that is down for half a minute (restarted, failed over) costs a save
# that long, not the save. A store that accepted the connection gets READ_TIMEOUT_S per answer.
ATTEMPTS = 8
MAX_ATTEMPTS_ENV = "AWS_MAX_ATTEMPTS"  # the AWS SDKs' own setting, which overrides ATTEMPTS
# The start-up check's: a store that does not answer fails the run within seconds.
CHECK_ATTEMPTS = 3
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 120
# s3fs's block: an upload sends what has gathered as one part of a multipart upload once it holds this much (S3's
# parts are 5 MiB at least, 10,000 at most), and a read fetches this much ahead.
BLOCK_BYTES = 16 << 20
# What the botocore error codes the start-up check meets mean to the user.
REFUSALS = {
    "InvalidAccessKeyId": "the store knows no such access key (AWS_ACCESS_KEY_ID)",
    "SignatureDoesNotMatch": "the secret key does not match the access key (AWS_SECRET_ACCESS_KEY)",
    "ExpiredToken": "the session token has expired (AWS_SESSION_TOKEN)",
    "InvalidToken": "the session token is not valid (AWS_SESSION_TOKEN)",
    "AccessDenied": "access denied: the identity may not write here",
    "NoSuchBucket": "the bucket does not exist",
    "404": "the bucket does not exist",
    "403": "forbidden: the credentials were refused, or the identity may not use this bucket",
}
# botocore's names for a connection that could not be made, or an answer that never came.
UNANSWERED = ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError")


def storage_options(url: str, attempts: int | None = None) -> dict[str, Any]:
    """fsspec's options for `url`: for s3://, the endpoint and region of the environment, path-style
    addressing for an S3-compatible endpoint (whose host names no bucket), the retries and time limits above,
    and no listing cache (another rank's writes must show at once)."""
    if not url.startswith("s3://"):
        return {}
    client: dict[str, Any] = {}
    config: dict[str, Any] = {
        "retries": {"max_attempts": attempts or int(os.environ.get(MAX_ATTEMPTS_ENV) or ATTEMPTS), "mode": "standard"},
        "connect_timeout": CONNECT_TIMEOUT_S,
        "read_timeout": READ_TIMEOUT_S,
    }
    if endpoint := os.environ.get(wire.S3_ENDPOINT_ENV):
        client["endpoint_url"] = endpoint
        config["s3"] = {"addressing_style": "path"}
    if region := os.environ.get(wire.S3_REGION_ENV):
        client["region_name"] = region
    return {
        "client_kwargs": client,
        "config_kwargs": config,
        "use_listings_cache": False,
        "default_block_size": BLOCK_BYTES,
    }


def filesystem(url: str, attempts: int | None = None) -> tuple[AbstractFileSystem, str]:
    """The file system of `url` and the path within it (bucket/prefix for s3://). fsspec keeps one instance per
    process and options."""
    fs, path = url_to_fs(url, **storage_options(url, attempts))
    return fs, path.rstrip("/")


def where(url: str) -> str:
    """`url`, with the endpoint it is on when that is not AWS's: for messages."""
    endpoint = os.environ.get(wire.S3_ENDPOINT_ENV)
    return f"{url} (at {endpoint})" if endpoint and url.startswith("s3://") else url


def refusal(error: BaseException) -> str | None:
    """What the store refused, in the user's words, when `error` (or what it wraps) is a refusal or an endpoint
    that does not answer; None for anything else."""
    for current in causes(error):
        code = (getattr(current, "response", None) or {}).get("Error", {}).get("Code")
        if code in REFUSALS:
            return f"{REFUSALS[code]} ({code})"
        if type(current).__name__ in UNANSWERED:
            return f"the endpoint does not answer ({current})"
    return None


def store_failure(error: BaseException) -> str | None:
    """One line for a request to an object store that failed for good (botocore's retries spent), found in
    `error` or what it wraps; None when `error` is not about an object store."""
    for current in causes(error):
        if type(current).__module__.split(".")[0] in ("botocore", "aiobotocore", "aiohttp"):
            return refusal(current) or f"the object store failed: {current}"
    return None


def check_writable(url: str) -> None:
    """Fail fast, before any training, when the store at `url` would refuse the checkpoints: the bucket must
    exist and the identity must be able to write, read and delete an object under the prefix. Raises
    CheckpointStorageError naming the URL and what was refused; anything else (a bug) propagates."""
    fs, path = filesystem(url, CHECK_ATTEMPTS)
    bucket = path.split("/", 1)[0]
    probe = f"{path}/.scaletrain-probe-{uuid.uuid4().hex}"
    try:
        if hasattr(fs, "call_s3"):  # s3fs: a missing bucket is an error of its own, not an empty listing
            with contextlib.suppress(PermissionError):  # a HEAD's 403 has no body to say why: the write does
                fs.call_s3("head_bucket", Bucket=bucket)
        fs.pipe_file(probe, b"probe")
        if fs.cat_file(probe) != b"probe":
            raise CheckpointStorageError(f"{where(url)}: an object written there reads back different")
        fs.rm_file(probe)
    except CheckpointStorageError:
        raise
    except Exception as error:
        if (what := refusal(error)) is None:
            raise
        raise CheckpointStorageError(f"cannot use checkpoint.dir {where(url)}: {what}") from None
