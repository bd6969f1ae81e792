"""Checkpoints, data and models on object storage, against a real S3 server (SeaweedFS on loopback, with its own
identities): a checkpoint is complete once its manifest is written last; damaged objects are found, set aside
and the one before resumed exactly; a store that refuses the trainer fails it at start, before any training; a
store that goes away during a save is retried, and a save that still fails is a write error; token files are
read by ranges, and a Hugging Face model is fetched once per machine."""

from __future__ import annotations

import json
import secrets

import numpy as np
import pytest
from s3fs import S3FileSystem

from scaletrain_testing.hf_models import save_tiny_llama, tiny_llama_model
from scaletrain_testing.seaweedfs import SeaweedS3
from scaletrain_testing.trainer_runs import config_for, free_port, run_trainer, start_pod
from scaletrain_testing.waiting import wait_until
from scaletrain_trainer.contract.config import CheckpointConfig
from scaletrain_trainer.contract.exit_codes import EXIT_STORAGE_ERROR, EXIT_WRITE_ERROR, CheckpointStorageError
from scaletrain_trainer.training.checkpoint import check_storage
from scaletrain_trainer.training.data import RangedTokens, TokenWindows

# Constant LR so that a run of 20 steps and the resumed tail of it follow the same schedule; saves at
# 5, 10, 15 and 20, of which 10, 15 and 20 are kept.
STRAIGHT = {"maxSteps": 20, "scheduler": {"name": "constant", "warmupSteps": 1}, "checkpoint": {"everySteps": 5}}
SHARD, MANIFEST = "__0_0.distcp", "manifest.json"
SAVE_OR_DOWN_S = 120  # a save held up by a store that is down, with botocore's retries


@pytest.fixture(scope="module")
def bucket(s3_server):
    return s3_server.make_bucket(f"checkpoints-{secrets.token_hex(3)}")


def s3_config(directory, url, overrides=None):
    """A run's config with its checkpoints at `url`, a prefix of the test's bucket."""
    config = config_for(directory, STRAIGHT | (overrides or {}))
    config["checkpoint"] = {"dir": url, "keep": 3} | config["checkpoint"]
    return config


def termination_message(run):
    return json.loads((run.directory / "termination-log").read_text())


def run_with_store(directory, config, store, nproc=2, **env):
    (directory / "termination-log").parent.mkdir(parents=True, exist_ok=True)
    (directory / "termination-log").touch()
    environment = store.env() | {"SCALETRAIN_TERMINATION_LOG": str(directory / "termination-log")} | env
    return run_trainer(directory, config, nproc, env=environment)


@pytest.fixture(scope="module")
def straight(s3_server, bucket, tmp_path_factory):
    directory = tmp_path_factory.mktemp("straight")
    run = run_with_store(directory, s3_config(directory, f"s3://{bucket}/straight"), s3_server)
    assert run.returncode == 0, run.output[-3000:]
    return run


def objects_under(fs, prefix):
    """{relative key: size} of every object under `prefix`."""
    return {name[len(prefix) + 1 :]: info["size"] for name, info in fs.find(prefix, detail=True).items()}


def test_each_checkpoint_has_a_manifest_of_all_its_objects_and_old_ones_are_pruned(s3_server, bucket, straight):
    fs = s3_server.filesystem()
    stored = objects_under(fs, f"{bucket}/straight")
    steps = sorted({key.split("/")[0] for key in stored})
    assert steps == ["step-00000010", "step-00000015", "step-00000020"]  # keep: 3; nothing partial is left
    for step in steps:
        manifest = json.loads(fs.cat_file(f"{bucket}/straight/{step}/{MANIFEST}"))
        listed = {name: entry["bytes"] for name, entry in manifest["files"].items()}
        on_store = {key.split("/", 1)[1]: size for key, size in stored.items() if key.startswith(f"{step}/")}
        assert manifest["step"] == int(step[5:]) and listed == {k: v for k, v in on_store.items() if k != MANIFEST}
        assert {SHARD, "__1_0.distcp", ".metadata", "training-config.json"} <= set(listed)


def _truncate(fs, key):
    fs.pipe_file(key, fs.cat_file(key)[: fs.size(key) // 2])


def _copy_of_straight(fs, bucket, name):
    """A copy of the straight run's checkpoints (steps 10, 15 and 20) under a prefix of the test's own."""
    prefix = f"{bucket}/{name}"
    fs.copy(f"{bucket}/straight", prefix, recursive=True)
    return prefix


def _resume_to_22(s3_server, prefix, directory):
    resumed = run_with_store(directory, s3_config(directory, f"s3://{prefix}", {"maxSteps": 22}), s3_server)
    assert resumed.returncode == 0, resumed.output[-3000:]
    return resumed


def test_damaged_checkpoints_are_set_aside_and_the_newest_sound_one_resumed_exactly(
    s3_server, bucket, straight, tmp_path
):
    fs = s3_server.filesystem()
    prefix = _copy_of_straight(fs, bucket, tmp_path.name)
    _truncate(fs, f"{prefix}/step-00000020/{SHARD}")
    # Step 10's manifest in step 15: a copy gone wrong.
    fs.pipe_file(f"{prefix}/step-00000015/{MANIFEST}", fs.cat_file(f"{prefix}/step-00000010/{MANIFEST}"))

    resumed = _resume_to_22(s3_server, prefix, tmp_path)

    assert f"step-00000020 is damaged ({SHARD} has " in resumed.output
    assert "step-00000015 is damaged (its manifest.json is step 10's)" in resumed.output
    assert f"resumed from s3://{prefix}/step-00000010 at step 10" in resumed.output
    set_aside = ["step-00000020.corrupt", "step-00000015.corrupt"]
    assert termination_message(resumed)["checkpointsSetAside"] == set_aside
    assert all(fs.exists(f"{prefix}/{aside}/{SHARD}") for aside in set_aside)  # kept for a post-mortem
    assert [r["step"] for r in resumed.metrics()] == list(range(11, 23))
    assert resumed.losses()[:10] == straight.losses()[10:]


def test_a_half_written_checkpoint_is_never_resumed_and_its_objects_are_removed(s3_server, bucket, straight, tmp_path):
    fs = s3_server.filesystem()
    prefix = _copy_of_straight(fs, bucket, tmp_path.name)
    fs.rm_file(f"{prefix}/step-00000020/{MANIFEST}")  # a save that died before its commit ...
    fs.pipe_file(f"{prefix}/step-00000020/__9_0.distcp", b"left by a save that died")  # ... with an object of its own
    fs.rm_file(f"{prefix}/step-00000015/.metadata")  # and a committed one that lost an object

    resumed = _resume_to_22(s3_server, prefix, tmp_path)

    assert "step-00000015 is damaged (.metadata is missing)" in resumed.output
    assert f"resumed from s3://{prefix}/step-00000010 at step 10" in resumed.output
    assert termination_message(resumed)["checkpointsSetAside"] == ["step-00000015.corrupt"]  # never complete: 20
    assert resumed.losses()[:10] == straight.losses()[10:]
    rewritten = json.loads(fs.cat_file(f"{prefix}/step-00000020/{MANIFEST}"))
    assert set(objects_under(fs, f"{prefix}/step-00000020")) == {*rewritten["files"], MANIFEST}  # the stray is gone


def test_asynchronous_saves_to_s3_train_and_checkpoint_as_synchronous_ones(s3_server, bucket, straight, tmp_path):
    config = s3_config(tmp_path, f"s3://{bucket}/async", {"checkpoint": {"everySteps": 5, "async": True}})
    run = run_with_store(tmp_path, config, s3_server)
    assert run.returncode == 0, run.output[-3000:]
    assert run.losses() == straight.losses()
    fs = s3_server.filesystem()
    for step in ("step-00000010", "step-00000015", "step-00000020"):  # the same objects, each rank's shards split alike
        ours = json.loads(fs.cat_file(f"{bucket}/async/{step}/{MANIFEST}"))["files"]
        theirs = json.loads(fs.cat_file(f"{bucket}/straight/{step}/{MANIFEST}"))["files"]
        assert sorted(ours) == sorted(theirs)


REFUSALS = {
    "wrong secret key": (
        lambda s3, bucket: ({"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, bucket),
        "SignatureDoesNotMatch",
    ),
    "unknown access key": (lambda s3, bucket: ({"AWS_ACCESS_KEY_ID": "nobody"}, bucket), "InvalidAccessKeyId"),
    "missing bucket": (lambda s3, bucket: ({}, "no-such-bucket-here"), "the bucket does not exist"),
    "read-only identity": (lambda s3, bucket: (s3.env(read_only=True), bucket), "may not write here (AccessDenied)"),
    "endpoint that does not answer": (
        lambda s3, bucket: ({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}, bucket),
        "the endpoint does not answer",
    ),
}


@pytest.fixture
def store_env(s3_server, monkeypatch):
    """This process's AWS variables set as a pod's are, and no s3fs client made before (each holds the
    credentials it was made with); none kept for the next test either."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    S3FileSystem.clear_instance_cache()
    yield monkeypatch
    S3FileSystem.clear_instance_cache()


@pytest.mark.parametrize("refusal", REFUSALS, ids=list(REFUSALS))
def test_each_refusal_of_the_store_at_start_is_a_checkpoint_storage_error_with_its_reason(
    refusal, s3_server, bucket, store_env
):
    make_env, reason = REFUSALS[refusal]
    env, in_bucket = make_env(s3_server, bucket)
    for name, value in env.items():
        store_env.setenv(name, value)
    url = f"s3://{in_bucket}/refused"
    with pytest.raises(CheckpointStorageError) as refused:
        check_storage(CheckpointConfig(dir=url))
    assert url in refused.value.cause and reason in refused.value.cause


def test_a_refused_trainer_exits_77_before_any_training_with_the_cause(s3_server, bucket, tmp_path):
    url = f"s3://{bucket}/refused"
    run = run_with_store(tmp_path, s3_config(tmp_path, url), s3_server, nproc=1, AWS_SECRET_ACCESS_KEY="not-it")
    assert run.returncode == EXIT_STORAGE_ERROR, run.output[-3000:]
    message = termination_message(run)
    assert message["result"] == "CheckpointStorageError" and "SignatureDoesNotMatch" in message["cause"]
    assert url in message["cause"] and run.metrics() == [] and "Traceback" not in run.output


def test_a_store_down_during_a_save_is_retried_then_a_save_that_still_fails_is_a_write_error(tmp_path):
    """On a server of the test's own, which it stops: once started again within botocore's retries (the save
    completes), once for good (the save's retries spent, a write error)."""
    with SeaweedS3(tmp_path / "seaweedfs") as server:
        server.make_bucket("saves")
        fs = server.filesystem()
        recovered = _stop_after_the_first_save(server, tmp_path / "recovered", restart=True)
        assert recovered.returncode == 0, recovered.output[-3000:]
        saved_10 = next(line for line in recovered.output.splitlines() if "recovered/step-00000010 in " in line)
        assert float(saved_10.rsplit(" in ", 1)[1].split()[0]) > 2  # it waited for the store, and went on
        assert fs.exists(f"saves/recovered/step-00000030/{MANIFEST}")

        failed = _stop_after_the_first_save(server, tmp_path / "failed", restart=False, AWS_MAX_ATTEMPTS="2")
    assert failed.returncode == EXIT_WRITE_ERROR, failed.output[-3000:]
    message = termination_message(failed)
    assert message["result"] == "WriteError" and "s3://saves/failed" in message["cause"]
    assert "the endpoint does not answer" in message["cause"], message


def _stop_after_the_first_save(server, directory, restart, **env):
    """A 2-rank pod saving every 5 of 30 steps to s3://saves/NAME (NAME: the directory's), paced to about
    0.1 s a step; the server stopped as soon as step 5 is committed, so that the save of step 10 meets it
    down, and started again at once when `restart` (it answers ~10 s later)."""
    config = s3_config(directory, f"s3://saves/{directory.name}", {"maxSteps": 30})
    options = {"seconds_per_read": 0.02, "samples": 200, "context_length": 16, "vocab_size": 64, "seed": 7}
    config["data"] = {"source": "scaletrain_testing.plugins.faults:SlowSynthetic", "options": options}
    pod = start_pod(directory, config, env=server.env() | env)
    try:
        committed = f"saves/{directory.name}/step-00000005/{MANIFEST}"
        wait_until(lambda: server.filesystem().exists(committed), SAVE_OR_DOWN_S, "the save of step 5")
        server.stop()
        if restart:
            server.start()
        return pod.wait(SAVE_OR_DOWN_S)
    finally:
        pod.kill()


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    """A uint16 tokens file of 3,000 ids below 64."""
    path = tmp_path_factory.mktemp("tokens") / "train.bin"
    np.random.default_rng(3).integers(0, 64, 3000, dtype=np.uint16).tofile(path)
    return path


def test_a_model_and_tokens_on_s3_train_as_local_ones_with_the_model_fetched_once_per_machine(
    s3_server, bucket, tokens, tmp_path
):
    pretrained = tmp_path / "pretrained"
    save_tiny_llama(pretrained)
    fs = s3_server.filesystem()
    fs.put(str(pretrained), f"{bucket}/models/tiny-llama", recursive=True)
    fs.put_file(str(tokens), f"{bucket}/data/train.bin")
    # On S3 read by 2 data workers a rank, forked processes with connections of their own.
    sources = {
        "local": (str(pretrained), {"source": "tokens", "path": str(tokens)}),
        "s3": (
            f"s3://{bucket}/models/tiny-llama",
            {"source": "tokens", "path": f"s3://{bucket}/data/train.bin", "workers": 2},
        ),
    }
    runs = {}
    for where, (model, data) in sources.items():
        overrides = {"maxSteps": 3, "model": tiny_llama_model(pretrained=model), "data": data}
        env = {"SCALETRAIN_MODEL_CACHE": str(tmp_path / "model-cache")}
        runs[where] = run_with_store(tmp_path / where, config_for(tmp_path / where, overrides), s3_server, **env)
        assert runs[where].returncode == 0, runs[where].output[-3000:]
    assert runs["s3"].losses() == runs["local"].losses()
    assert runs["s3"].output.count(f"fetched s3://{bucket}/models/tiny-llama") == 1  # two ranks, one copy


def test_token_windows_are_read_by_ranges_never_the_whole_file(s3_server, bucket, tokens, store_env):
    s3_server.filesystem().put_file(str(tokens), f"{bucket}/data/ranged.bin")
    remote = RangedTokens(f"s3://{bucket}/data/ranged.bin", np.dtype(np.uint16))
    fs, _ = remote.filesystem()
    fs.connect()
    ranges = []
    fs.s3.meta.events.register("before-send.s3.GetObject", lambda request, **_: ranges.append(request.headers["Range"]))
    inputs, targets = TokenWindows(remote, 16)[10]
    local = np.fromfile(tokens, dtype=np.uint16)
    assert inputs.tolist() == local[160:176].tolist() and targets.tolist() == local[161:177].tolist()
    assert ranges == [b"bytes=320-353"]  # 17 tokens of 2 bytes: one request, for just the window
