"""Object storage in the trainer, without a store: the options s3fs gets from the environment, what a refusal
or a failed request means to the user, and the names and set-aside rules of the checkpoint stores."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from scaletrain_trainer.storage import objects
from scaletrain_trainer.storage.checkpoint_stores import LocalDirectory, checkpoint_names, checkpoint_store

ENDPOINT = "http://seaweedfs.storage:8333"


def client_error(code: str, status: int, operation: str = "PutObject") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "refused"}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation
    )


def as_s3fs_raises(error: BaseException, translated: type[OSError] = PermissionError) -> OSError:
    """s3fs raises an OSError translated from botocore's error, with that error as its cause."""
    try:
        raise translated("refused") from error
    except OSError as raised:
        return raised


def test_an_s3_compatible_endpoint_gets_path_style_addressing_retries_and_no_listing_cache(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", ENDPOINT)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    options = objects.storage_options("s3://bucket/prefix")
    assert options["client_kwargs"] == {"endpoint_url": ENDPOINT, "region_name": "eu-west-1"}
    assert options["config_kwargs"]["s3"] == {"addressing_style": "path"}
    assert options["config_kwargs"]["retries"] == {"max_attempts": objects.ATTEMPTS, "mode": "standard"}
    assert options["use_listings_cache"] is False


def test_aws_own_endpoints_keep_botocores_addressing_and_aws_max_attempts_is_honoured(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    options = objects.storage_options("s3://bucket/prefix")
    assert options["client_kwargs"] == {} and "s3" not in options["config_kwargs"]
    assert options["config_kwargs"]["retries"]["max_attempts"] == 2
    assert objects.storage_options("s3://bucket/prefix", attempts=3)["config_kwargs"]["retries"]["max_attempts"] == 3


def test_other_schemes_get_no_s3_options():
    assert objects.storage_options("gs://bucket/prefix") == {}


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (as_s3fs_raises(client_error("InvalidAccessKeyId", 403)), "no such access key (AWS_ACCESS_KEY_ID)"),
        (as_s3fs_raises(client_error("SignatureDoesNotMatch", 403)), "secret key does not match"),
        (as_s3fs_raises(client_error("AccessDenied", 403)), "may not write here (AccessDenied)"),
        (as_s3fs_raises(client_error("404", 404, "HeadBucket"), FileNotFoundError), "the bucket does not exist"),
        (EndpointConnectionError(endpoint_url=ENDPOINT), "the endpoint does not answer"),
    ],
    ids=["unknown key", "wrong secret", "read-only identity", "no bucket", "no answer"],
)
def test_a_refusal_is_said_in_the_users_words(error, said):
    assert said in objects.refusal(error)
    assert said in objects.store_failure(error)


def test_a_failed_request_that_is_no_refusal_is_a_store_failure_and_anything_else_neither():
    server_error = as_s3fs_raises(client_error("InternalError", 500), OSError)
    assert objects.refusal(server_error) is None
    assert objects.store_failure(server_error).startswith("the object store failed: An error occurred (InternalError)")
    assert objects.refusal(ValueError("a bug")) is None and objects.store_failure(ValueError("a bug")) is None


def test_the_store_follows_the_url_and_lists_checkpoints_by_step(tmp_path):
    assert isinstance(checkpoint_store(str(tmp_path)), LocalDirectory)
    names = ["step-00000010", "step-00000002", "step-00000003.corrupt", "step-00000004.partial", "notes"]
    assert checkpoint_names(names) == ["step-00000002", "step-00000010"]


def test_a_directory_sets_a_damaged_checkpoint_aside_under_a_free_name_and_commits_by_rename(tmp_path):
    store = LocalDirectory(str(tmp_path))
    for name in ("step-00000005", "step-00000005.corrupt"):
        (tmp_path / name).mkdir()
    assert store.set_aside("step-00000005") == "step-00000005.corrupt-2"
    (tmp_path / "step-00000001.partial").mkdir()  # a crash mid-write
    store.start_writing("step-00000010")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-00000005.corrupt",
        "step-00000005.corrupt-2",
        "step-00000010.partial",
    ]
    store.commit("step-00000010", "{}")
    assert store.completed() == ["step-00000010"] and store.read_text(store.location("step-00000010"), "manifest.json")
