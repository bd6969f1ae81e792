"""CEL rules for the generated CRD (x-kubernetes-validations): the API server's copy of the cross-field
rules each model checks in its `problems()`, so that `kubectl apply` refuses what the operator would.

The operator's models carry their own (`with_cel_rules`). The training config is the trainer's, which
knows nothing of the CRD: its rules are here, by model, and `CrdJsonSchema` adds them as it writes the
schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from scaletrain_trainer.contract.config import (
    FILE_DATA_SOURCES,
    INSTRUCTIONS_SOURCE,
    DataConfig,
    EvalConfig,
    ModelConfig,
    TrainingConfig,
)
from scaletrain_trainer.contract.validation import SpecModel


def cel_rule(rule: str, message: str, field_path: str, reason: str = "FieldValueInvalid") -> dict[str, str]:
    """One CEL rule for the generated CRD; mirror it in the model's `problems()`."""
    return {"rule": rule, "message": message, "fieldPath": field_path, "reason": reason}


def with_cel_rules(*rules: dict[str, str]) -> ConfigDict:
    """SpecModel's config plus CEL rules that the CRD generator emits as x-kubernetes-validations."""
    return SpecModel.model_config | ConfigDict(json_schema_extra={"x-kubernetes-validations": list(rules)})


# Each mirrors its model's problems() in trainer/scaletrain_trainer/contract/config.py.
TRAINING_CONFIG_RULES: dict[type, tuple[dict[str, str], ...]] = {
    ModelConfig: (cel_rule("self.width % self.heads == 0", "width must be divisible by heads", ".width"),),
    DataConfig: (
        cel_rule(
            f"!(self.source in [{', '.join(repr(source) for source in FILE_DATA_SOURCES)}]) || has(self.path)",
            f"path is required for the {', '.join(FILE_DATA_SOURCES)} sources",
            ".path",
            "FieldValueRequired",
        ),
        cel_rule(
            f"!has(self.packing) || !self.packing || self.source == '{INSTRUCTIONS_SOURCE}'",
            f"packing packs {INSTRUCTIONS_SOURCE} only: set source {INSTRUCTIONS_SOURCE}, or remove it",
            ".packing",
        ),
    ),
    EvalConfig: (
        cel_rule("has(self.fraction) != has(self.path)", "set exactly one of fraction and path", ".fraction"),
    ),
    TrainingConfig: (
        cel_rule(
            "self.microBatchSize <= self.globalBatchSize",
            "microBatchSize must not exceed globalBatchSize",
            ".microBatchSize",
        ),
        cel_rule(
            "self.scheduler.warmupSteps <= self.maxSteps",
            "scheduler.warmupSteps must not exceed maxSteps",
            ".scheduler.warmupSteps",
        ),
    ),
}


class CrdJsonSchema(GenerateJsonSchema):
    """Pydantic's JSON Schema, with the training config's CEL rules on its models."""

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        json_schema: dict[str, Any] = super().model_schema(schema)
        if rules := TRAINING_CONFIG_RULES.get(schema["cls"]):
            json_schema["x-kubernetes-validations"] = list(rules)
        return json_schema
