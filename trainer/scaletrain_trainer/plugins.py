"""Custom models and datasets, named by import path ("package.module:function")."""

from __future__ import annotations

import importlib
from typing import Any

from .validation import Problem, ProblemsError


def load_object(import_path: str, field: tuple[str, ...]) -> Any:
    """The object at `import_path`; a config error at `field` if it cannot be imported."""
    module_name, _, attribute = import_path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        message = f"cannot import {import_path}: {error}; is the package installed in the image (or on PYTHONPATH)?"
        raise ProblemsError([Problem(field, message)]) from None
