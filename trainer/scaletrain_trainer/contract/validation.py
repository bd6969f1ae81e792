"""Spec models and error reporting shared by the training config and the ScaleTrainJob API.

Every problem a user can make is reported as a `Problem`: the dotted field path in the user's own
camelCase spelling plus a message that says what to do. Per-field checks come from pydantic;
cross-field rules are written as `SpecModel.problems()` generators, so that one model can report
several problems at once, each at its own path. The CRD's CEL mirrors of those rules are the
operator's (operator/scaletrain_operator/api/cel.py).
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic.alias_generators import to_camel

PathPart = str | int


@dataclass(frozen=True)
class Problem:
    path: tuple[PathPart, ...]
    message: str

    def __str__(self) -> str:
        return f"{format_path(self.path)}: {self.message}"


class ProblemsError(ValueError):
    """One or more problems, with paths relative to where the error is raised."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


def format_path(path: Iterable[PathPart]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(document)"


class SpecModel(BaseModel):
    """camelCase fields, strict types, unknown fields rejected, cross-field rules in `problems()`."""

    # strict: no coercion the CRD would refuse ("2" for a number, true for 1, "yes" for a boolean).
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", validate_default=True, strict=True
    )

    def problems(self) -> Iterator[Problem]:
        """Cross-field rules; yield a Problem per broken rule, with a path relative to this model."""
        return iter(())

    @model_validator(mode="after")
    def _check_cross_field_rules(self):
        found = list(self.problems())
        if found:
            raise ProblemsError(found)
        return self


def problems_from_validation_error(
    error: ValidationError, root: type[BaseModel], prefix: tuple[PathPart, ...] = ()
) -> list[Problem]:
    """Turn pydantic's errors into Problems with user-facing paths and messages."""
    problems: list[Problem] = []
    for item in error.errors():
        loc = prefix + tuple(item["loc"])
        cause = item.get("ctx", {}).get("error")
        if isinstance(cause, ProblemsError):
            problems.extend(Problem(loc + p.path, p.message) for p in cause.problems)
            continue
        problems.append(Problem(loc, _message(item, root, tuple(item["loc"]))))
    return problems


def _message(item: dict[str, Any], root: type[BaseModel], loc: tuple[PathPart, ...]) -> str:
    kind = item["type"]
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        known = _field_aliases(root, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean {close[0]}?" if close else f"known fields: {', '.join(sorted(known))}"
        return f"unknown field; {hint}"
    message = item["msg"]
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    return f"{message} (got {item['input']!r})"


def _field_aliases(root: type[BaseModel], loc: tuple[PathPart, ...]) -> list[str]:
    """The camelCase field names of the model reached by walking `loc` down from `root`."""
    models = [root]
    for part in loc:
        if isinstance(part, int):  # a list index: the element model is already in `models`
            continue
        fields = [f for m in models for name, f in m.model_fields.items() if part in (name, f.alias)]
        models = [
            t for f in fields for t in _leaf_types(f.annotation) if isinstance(t, type) and issubclass(t, BaseModel)
        ]
    return sorted({f.alias or name for m in models for name, f in m.model_fields.items()})


def _leaf_types(annotation: Any) -> list[Any]:
    """The plain types inside an annotation, through Optional, unions, lists, dicts and Annotated."""
    args = typing.get_args(annotation)
    if not args:
        return [annotation]
    if typing.get_origin(annotation) is typing.Annotated:
        return _leaf_types(args[0])
    return [leaf for arg in args for leaf in _leaf_types(arg)]
