"""The torch-free training config: derivation of accumulation, loading, and field-named errors."""

from __future__ import annotations

import pytest

from scaletrain_trainer.contract.config import TrainingConfig, load_training_config, parse_training_config
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
