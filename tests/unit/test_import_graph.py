"""The seams, read from the source (no import runs). The operator's rooms import in one direction,
cli -> {controller, local, convert} -> {policy, render, progress, report_server, in_place} -> {validation, api} ->
the trainer's contract, the operator takes nothing of the trainer but its contract, and the contract imports nothing of
torch or of the rest of the trainer. The trainer's rooms import in one direction too: the entry modules ->
training -> {models, storage, reporting} -> contract. No module imports itself through a cycle. Importing the
operator as a process is checked in tests/integration/test_contract_imports.py."""

from __future__ import annotations

import pytest

from scaletrain_testing.imports import (
    import_graph,
    imports_against_the_rooms,
    is_torch,
    is_trainer_beyond_contract,
    operator_modules,
    room,
    trainer_import_graph,
    trainer_room,
)

# Each tier imports the tiers below it. Within a tier: a decision may read how its objects are rendered
# (policy -> render); the status-report endpoint answers the pods' agents from the in-place gangs
# (report_server -> in_place), which take a pod as its agent said it ended (in_place -> policy); the types call
# the checks of their cross-field rules (api -> those modules of validation), and the checks read the API's names
# and times, never its types (validation -> naming, timestamps).
TIERS = (
    {"cli"},
    {"controller", "local", "convert"},
    {"policy", "render", "progress", "report_server", "in_place"},
    {"validation", "api"},
)
ALLOWED_ROOMS = {
    "package": set(),
    **{name: set().union(*TIERS[depth + 1 :]) for depth, tier in enumerate(TIERS) for name in tier},
    "policy": {"render", *TIERS[3]},
    "report_server": {"in_place", *TIERS[3]},
    "in_place": {"policy", *TIERS[3]},
    "api": operator_modules(
        "validation", "bounds", "elastic_sizes", "kube_rules", "kube_schema", "pass_through", "spec_rules"
    ),
    "validation": operator_modules("api", "naming", "timestamps"),
}
# The trainer's rooms, lowest first: the torch-free contract; storage, reporting and the models (which may read
# storage: a model on a store is fetched); the training; and the entry modules at the top, which pods run.
TRAINER_TIERS = ({"entry"}, {"training"}, {"models", "storage", "reporting"}, {"contract"})
TRAINER_ALLOWED = {
    "package": set(),
    **{name: set().union(*TRAINER_TIERS[depth + 1 :]) for depth, tier in enumerate(TRAINER_TIERS) for name in tier},
    "models": {"storage", "contract"},
}


def test_each_room_imports_only_the_rooms_below_it():
    assert imports_against_the_rooms(import_graph(), "scaletrain_operator.", room, ALLOWED_ROOMS) == []


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


def test_each_trainer_room_imports_only_the_rooms_below_it():
    graph = trainer_import_graph()
    assert imports_against_the_rooms(graph, "scaletrain_trainer.", trainer_room, TRAINER_ALLOWED) == []


@pytest.mark.parametrize("graph_of", [import_graph, trainer_import_graph], ids=["operator", "trainer"])
def test_there_is_no_import_cycle(graph_of):
    graph = graph_of()
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
    assert "scaletrain_operator.api.job" in graph["scaletrain_operator.controller.reconcile"]
    assert "scaletrain_operator.policy.gang_policy" in graph["scaletrain_operator.local.gang"]
    assert "scaletrain_operator.api.naming" in graph["scaletrain_operator.render.children"]  # `from . import naming`
    assert "scaletrain_trainer.contract.exit_codes" in graph["scaletrain_operator.policy.gang_policy"]
    assert {room(m) for m in graph} == {"package", "cli", "convert", "progress", *set().union(*TIERS[1:])}
    trainer = trainer_import_graph()
    assert (
        "scaletrain_trainer.contract.wire" in trainer["scaletrain_trainer.reporting.metrics"]
    )  # `from ..contract import wire`
    assert "torch" in trainer["scaletrain_trainer.training.loop"]
    assert "scaletrain_trainer.training.loop" in trainer["scaletrain_trainer.__main__"]  # a lazy import
    assert {trainer_room(m) for m in trainer} == {"package", *set().union(*TRAINER_TIERS)}
