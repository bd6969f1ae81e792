"""The torch-free training config: derivation of accumulation, loading, and field-named errors."""

from __future__ import annotations

import pytest

from scaletrain_trainer.contract.config import TrainingConfig, load_training_config, parse_training_config
from scaletrain_trainer.contract.storage_urls import is_object_url
from scaletrain_trainer.contract.validation import ProblemsError

MINIMAL = {"globalBatchSize": 64, "microBatchSize": 4}


@pytest.mark.parametrize("world_size, steps", [(1, 16), (2, 8), (4, 4), (16, 1)])
def test_accumulation_steps_are_global_over_micro_times_world(world_size, steps):
    assert parse_training_config(MINIMAL).accumulation_steps(world_size) == steps


@pytest.mark.parametrize("world_size", [3, 32])
def test_accumulation_must_divide_exactly(world_size):
    with pytest.raises(ProblemsError) as error:
        parse_training_config(MINIMAL).accumulation_steps(world_size)
    (problem,) = error.value.problems
    assert str(problem) == (
        f"globalBatchSize: 64 is not divisible by microBatchSize × world size (4 × {world_size} = {4 * world_size})"
    )


def test_defaults_are_a_runnable_tiny_gpt():
    config = parse_training_config(MINIMAL)
    assert (config.model.name, config.data.source, config.strategy, config.precision) == (
        "gpt",
        "synthetic",
        "auto",
        "auto",
    )
    assert config.checkpoint.dir is None and config.metrics_port == 9400
    assert not config.compile  # eager: a compile costs tens of seconds at every start
    assert (config.data.workers, config.data.prefetch_factor) == (None, 2)  # workers chosen by device at run time


def test_json_round_trip_is_lossless():
    config = parse_training_config(MINIMAL | {"model": {"name": "mypkg.models:build", "options": {"depth": 3}}})
    assert TrainingConfig.model_validate_json(config.to_json()) == config
    assert '"globalBatchSize":64' in config.to_json()  # camelCase on the wire, as in the spec


def test_load_from_env_and_from_file(tmp_path):
    from_env = load_training_config(environ={"SCALETRAIN_CONFIG": '{"globalBatchSize": 8, "microBatchSize": 2}'})
    path = tmp_path / "training.yaml"
    path.write_text("globalBatchSize: 8\nmicroBatchSize: 2\n")
    assert load_training_config(str(path), environ={}) == from_env


@pytest.mark.parametrize(
    "environ, fragment",
    [
        ({}, "no training config: pass --config FILE or set $SCALETRAIN_CONFIG"),
        ({"SCALETRAIN_CONFIG": "{not json"}, "$SCALETRAIN_CONFIG: not valid YAML"),
        (
            {"SCALETRAIN_CONFIG": '{"globalBatchSize": 8, "microBatchSize": 2, "precison": "bf16"}'},
            "precison: unknown field; did you mean precision?",
        ),
        (
            {"SCALETRAIN_CONFIG": '{"globalBatchSize": 8, "microBatchSize": 2, "data": {"source": "tokens"}}'},
            "data.path: required for source tokens",
        ),
        (
            {"SCALETRAIN_CONFIG": '{"globalBatchSize": 8, "microBatchSize": 2, "data": {"workers": 65}}'},
            "data.workers: Input should be less than or equal to 64 (got 65)",
        ),
        (
            {"SCALETRAIN_CONFIG": '{"globalBatchSize": 8, "microBatchSize": 2, "data": {"prefetchFactor": 0}}'},
            "data.prefetchFactor: Input should be greater than or equal to 1 (got 0)",
        ),
        (
            {"SCALETRAIN_CONFIG": '{"globalBatchSize": 8, "microBatchSize": 2, "compile": "max-autotune"}'},
            "compile: Input should be a valid boolean (got 'max-autotune')",
        ),
    ],
)
def test_bad_configs_name_the_field(environ, fragment):
    with pytest.raises(ProblemsError) as error:
        load_training_config(environ=environ)
    assert fragment in str(error.value)


def test_max_non_finite_steps_is_at_least_one_and_three_by_default():
    minimal = {"globalBatchSize": 8, "microBatchSize": 8}
    assert parse_training_config(minimal).max_non_finite_steps == 3
    with pytest.raises(ProblemsError, match="maxNonFiniteSteps: "):
        parse_training_config(minimal | {"onNonFinite": "skip", "maxNonFiniteSteps": 0})


TEXT = {"source": "text", "path": "/data/train.txt"}
HF_CONFIG = {"model_type": "llama"}

# (case, the config over MINIMAL, the field path of the one problem, a fragment of its message)
MALFORMED_URLS = [
    ("no bucket", {"checkpoint": {"dir": "s3://"}}, "checkpoint.dir", "names no bucket: give s3://BUCKET/PREFIX"),
    ("an empty bucket", {"checkpoint": {"dir": "s3:///ckpt"}}, "checkpoint.dir", "names no bucket"),
    ("a bucket too short", {"checkpoint": {"dir": "s3://ab/ckpt"}}, "checkpoint.dir", "'ab' is not an S3 bucket name"),
    ("an uppercase bucket", {"checkpoint": {"dir": "s3://Team/ckpt"}}, "checkpoint.dir", "not an S3 bucket name"),
    ("a bucket ending in a dot", {"checkpoint": {"dir": "s3://team./x"}}, "checkpoint.dir", "not an S3 bucket name"),
    ("two dots in a row", {"checkpoint": {"dir": "s3://team..a/x"}}, "checkpoint.dir", "not an S3 bucket name"),
    ("a query", {"data": TEXT | {"path": "s3://team-a/train.bin?versionId=3"}}, "data.path", "a query or fragment"),
    ("a fragment", {"data": TEXT | {"path": "s3://team-a/train.bin#x"}}, "data.path", "give s3://BUCKET/KEY"),
    ("a misspelt scheme", {"checkpoint": {"dir": "s4://team-a/ckpt"}}, "checkpoint.dir", "s4:// is not object storage"),
    ("http", {"data": TEXT | {"path": "http://files/train.txt"}}, "data.path", "http:// is not object storage"),
    ("no scheme", {"checkpoint": {"dir": "://team-a/ckpt"}}, "checkpoint.dir", "not a URL of object storage"),
    ("an empty part", {"checkpoint": {"dir": "s3://team-a//ckpt"}}, "checkpoint.dir", "an empty part (//)"),
    ("a data bucket", {"data": TEXT | {"path": "s3://team-a"}}, "data.path", "names a bucket or a prefix"),
    ("a data prefix", {"data": TEXT | {"path": "s3://team-a/corpus/"}}, "data.path", "not an object"),
    ("an eval bucket", {"data": TEXT, "eval": {"path": "s3://team-a/"}}, "eval.path", "names a bucket or a prefix"),
    ("pretrained weights", {"model": {"name": "hf", "options": {"pretrained": "s3:///llama"}}},
     "model.options.pretrained", "names no bucket"),
    ("an hf config directory", {"model": {"name": "hf", "options": {"config": "gs:/x", "pretrained": "s3://w-1/x"}}},
     "model.options.config", "not a URL of object storage"),
]  # fmt: skip


@pytest.mark.parametrize("config, path, fragment", [c[1:] for c in MALFORMED_URLS], ids=[c[0] for c in MALFORMED_URLS])
def test_a_malformed_object_storage_url_is_refused_at_its_field(config, path, fragment):
    with pytest.raises(ProblemsError) as error:
        parse_training_config(MINIMAL | config)
    (problem,) = error.value.problems
    assert (".".join(map(str, problem.path)), fragment in problem.message) == (path, True), problem


@pytest.mark.parametrize(
    "config",
    [
        {"checkpoint": {"dir": "s3://team-a"}},  # a bucket's root
        {"checkpoint": {"dir": "s3://team-a.checkpoints/llama/run-1/"}},
        {"checkpoint": {"dir": "/checkpoints/run-1"}},  # plain paths are the pod's, as ever
        {"checkpoint": {"dir": "checkpoints"}},
        {"data": TEXT | {"path": "s3://team-a/corpus/train.txt"}, "eval": {"path": "s3://team-a/corpus/val.txt"}},
        {"data": {"source": "tokens", "path": "gs://team_a/train.bin"}},  # another fsspec store: its own names
        {"model": {"name": "hf", "options": {"pretrained": "s3://team-a/llama", "config": "s3://team-a/llama"}}},
        {"model": {"name": "hf", "options": {"config": HF_CONFIG}}},
        {"data": {"source": "mypkg.data:build", "options": {"url": "http://not-checked/"}}},  # a custom source's own
    ],
)
def test_well_formed_object_storage_urls_and_plain_paths_pass(config):
    parse_training_config(MINIMAL | config)


def test_object_storage_urls_are_told_from_the_pods_paths():
    paths = ["s3://team-a/x", "gs://team_a/x", "/data/x", "data/x", "s4://team-a/x", "http://files/x"]
    assert [is_object_url(path) for path in paths] == [True, True, False, False, False, False]
