"""The operator package's three wings import in one direction: cli -> {controller, local} -> api ->
trainer config, never back, and no module imports itself through a cycle (read from the source)."""

from __future__ import annotations

from scaletrain_testing.imports import import_graph, wing

ALLOWED_WINGS = {
    "package": set(),
    "cli": {"api", "controller", "local"},
    "controller": {"api"},
    "local": {"api"},
    "api": set(),
}
# What the API and the controller may use of the trainer: its torch-free config, validation and exit codes.
TORCH_FREE_TRAINER = {
    "scaletrain_trainer.contract.config",
    "scaletrain_trainer.contract.validation",
    "scaletrain_trainer.contract.exit_codes",
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


def test_the_api_and_controller_use_only_the_torch_free_trainer_config():
    wrong = [
        f"{module} imports {imported}"
        for module, imports in import_graph().items()
        if wing(module) in ("api", "controller")
        for imported in imports
        if imported.startswith("scaletrain_trainer.") and imported not in TORCH_FREE_TRAINER
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


def test_the_graph_sees_the_wings():
    """The checks above would pass vacuously if the graph missed the imports."""
    graph = import_graph()
    assert "scaletrain_operator.api.models" in graph["scaletrain_operator.controller.reconcile"]
    assert "scaletrain_operator.api.gang_policy" in graph["scaletrain_operator.local.gang"]
    assert "scaletrain_operator.api.naming" in graph["scaletrain_operator.api.render"]  # `from . import naming`
    assert "scaletrain_trainer.contract.exit_codes" in graph["scaletrain_operator.api.gang_policy"]
    assert {wing(m) for m in graph} == {"package", "cli", "api", "controller", "local"}
