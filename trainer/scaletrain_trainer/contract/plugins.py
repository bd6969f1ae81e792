"""Custom models, data sets and losses, named by import path ("package.module:function") in the training config:
resolved where the trainer builds them (models/, training/), a failure a config error at the field that names
them. Torch-free, as the rest of contract/: it imports only what the config names."""

from __future__ import annotations

import importlib
from typing import Any

from .validation import Problem, ProblemsError


def build_from(import_path: str, field: tuple[str, ...], options: dict[str, Any], kind: type, what: str) -> Any:
    """`import_path(**options)`, which must be a `kind`: a config error at `field` otherwise (exit 78,
    not retried), as when it cannot be imported or refuses the options."""
    factory = load_object(import_path, field)
    try:
        built = factory(**options)
    except TypeError as error:  # the options do not fit its signature
        raise ProblemsError([Problem(field, f"{import_path}(**options) failed: {error}")]) from None
    if not isinstance(built, kind):
        message = f"{import_path} returned {type(built).__name__}, not {what}"
        raise ProblemsError([Problem(field, message)])
    return built


def load_object(import_path: str, field: tuple[str, ...]) -> Any:
    """The object at `import_path`; a config error at `field` if it cannot be imported."""
    module_name, _, attribute = import_path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        message = f"cannot import {import_path}: {error}; is the package installed in the image (or on PYTHONPATH)?"
        raise ProblemsError([Problem(field, message)]) from None
