"""The operator's and the trainer's import graphs, read from the source (no import runs): which module
imports which."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from pathlib import Path

from .jobs import REPO

PACKAGE_DIR = REPO / "operator" / "scaletrain_operator"
TRAINER_DIR = REPO / "trainer" / "scaletrain_trainer"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts[1:]  # without operator/ or trainer/
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """The absolute names of the modules `path` imports, at any depth of its code (lazy imports too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.add(base)
            # `from . import naming` imports the module base.naming
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _modules(directory: Path) -> dict[str, Path]:
    return {module_name(path): path for path in directory.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    """Each module of the operator package -> the modules of the package and of the trainer it imports."""
    modules = _modules(PACKAGE_DIR)
    known = set(modules) | set(_modules(TRAINER_DIR))
    return {name: imported_modules(path) & known for name, path in modules.items()}


def trainer_import_graph() -> dict[str, set[str]]:
    """Each module of the trainer package -> the trainer's modules it imports, and torch where it does."""
    modules = _modules(TRAINER_DIR)
    return {name: {m for m in imported_modules(path) if m in modules or is_torch(m)} for name, path in modules.items()}


def is_torch(module: str) -> bool:
    return module.split(".")[0] == "torch"


def is_trainer_beyond_contract(module: str) -> bool:
    """A trainer module the operator may not import: any but the package itself and its contract."""
    return module.startswith("scaletrain_trainer.") and not module.startswith("scaletrain_trainer.contract")


def operator_modules(room: str, *names: str) -> set[str]:
    """The modules `names` of the operator's `room`, with the room's package, which `from ..api import naming`
    imports too."""
    return {f"scaletrain_operator.{room}", *(f"scaletrain_operator.{room}.{name}" for name in names)}


def room(module: str) -> str:
    """The operator's room of `module`: its folder (api, validation, policy, ...) or its top-level module
    (cli, progress, convert); "package" for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "package"


def trainer_room(module: str) -> str:
    """The trainer's room of `module`: its folder (contract, training, ...); "entry" for a module at the top (the
    ones pods run: __main__, launch, torchrun, startup, export); "package" for the package itself."""
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    return parts[1] if (TRAINER_DIR / parts[1]).is_dir() else "entry"


def imports_against_the_rooms(
    graph: Mapping[str, set[str]], package: str, room_of: Callable[[str], str], allowed: Mapping[str, set[str]]
) -> list[str]:
    """`A imports B` for each import of `graph` within `package` from one room into another that `allowed` (each
    room's rooms below it, and the single modules of other rooms it may import) lists neither as a room nor as a
    module."""
    return [
        f"{module} imports {imported}"
        for module, imports in graph.items()
        for imported in imports
        if imported.startswith(package)
        and room_of(imported) != room_of(module)
        and room_of(imported) not in allowed[room_of(module)]
        and imported not in allowed[room_of(module)]
    ]
