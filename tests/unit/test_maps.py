"""The maps a newcomer reads the tree by stay whole: every module of the operator has its line in CONTRIBUTING.md's
layout, under its room, and every module of the trainer its place in docs/trainer.md's table of rooms (or among
its entry modules). A module added without its line fails here."""

from __future__ import annotations

from scaletrain_testing.imports import PACKAGE_DIR, TRAINER_DIR
from scaletrain_testing.jobs import REPO
from scaletrain_testing.maps import contributing_rooms, modules, trainer_rooms, unmapped


def test_every_operator_module_is_on_contributings_map_under_its_room():
    assert unmapped(PACKAGE_DIR, contributing_rooms()) == []


def test_every_trainer_module_is_on_the_trainer_docs_map_under_its_room():
    assert unmapped(TRAINER_DIR, trainer_rooms()) == []


def test_the_maps_count_the_trainers_rooms_as_they_are():
    count = len({room for room, _ in modules(TRAINER_DIR) if room})
    words = {3: "three", 4: "four", 5: "five", 6: "six"}[count]
    assert f"It has {words} rooms" in (REPO / "docs" / "trainer.md").read_text()
    assert f"and {words} rooms" in (REPO / "README.md").read_text()
