"""The seams, read from the source (no import runs): the operator's wings import in one direction,
cli -> {controller, local} -> api, the operator takes nothing of the trainer but its contract, and the
contract imports nothing of torch or of the rest of the trainer. No module imports itself through a cycle.
Importing the operator as a process is checked in tests/integration/test_contract_imports.py."""

from __future__ import annotations

from scaletrain_testing.imports import import_graph, is_torch, is_trainer_beyond_contract, trainer_import_graph, wing

ALLOWED_WINGS = {
    "package": set(),
    "cli": {"api", "controller", "local"},
    "controller": {"api"},
    "local": {"api"},
    "api": set(),
}


def test_each_wing_imports_only_the_wings_below_it():
    wrong = [
        f"{module} imports {imported}"
        for module, imports in import_graph().items()
        for imported in imports
        if imported.startswith("scaletrain_operator.")
        and wing(imported) != wing(module)
        and wing(imported) not in ALLOWED_WINGS[wing(module)]
    ]
    assert wrong == []


def test_the_operator_imports_only_the_trainers_contract():
    wrong = [
        f"{module} imports {imported}"
        for module, imports in import_graph().items()
        for imported in imports
        if is_trainer_beyond_contract(imported)
    ]
    assert wrong == []


def test_the_contract_imports_neither_torch_nor_the_rest_of_the_trainer():
    wrong = [
        f"{module} imports {imported}"
        for module, imports in trainer_import_graph().items()
        if module.startswith("scaletrain_trainer.contract")
        for imported in imports
        if is_torch(imported) or is_trainer_beyond_contract(imported)
    ]
    assert wrong == []


def test_there_is_no_import_cycle():
    graph = import_graph()
    graph = {module: imports & set(graph) for module, imports in graph.items()}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "import cycle: " + " -> ".join((*path, module))
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())


def test_the_graphs_see_the_imports():
    """The checks above would pass vacuously if the graphs missed the imports."""
    graph = import_graph()
    assert "scaletrain_operator.api.models" in graph["scaletrain_operator.controller.reconcile"]
    assert "scaletrain_operator.api.gang_policy" in graph["scaletrain_operator.local.gang"]
    assert "scaletrain_operator.api.naming" in graph["scaletrain_operator.api.render"]  # `from . import naming`
    assert "scaletrain_trainer.contract.exit_codes" in graph["scaletrain_operator.api.gang_policy"]
    assert {wing(m) for m in graph} == {"package", "cli", "api", "controller", "local"}
    trainer = trainer_import_graph()
    assert (
        "scaletrain_trainer.contract.wire" in trainer["scaletrain_trainer.reporting.metrics"]
    )  # `from ..contract import wire`
    assert "torch" in trainer["scaletrain_trainer.training.loop"]
    assert "scaletrain_trainer.training.loop" in trainer["scaletrain_trainer.__main__"]  # a lazy import
