"""The maps a newcomer reads the tree by, as text: CONTRIBUTING.md's layout of the operator, docs/trainer.md's table of
the trainer's rooms (tests/unit/test_maps.py holds them to the tree)."""

from __future__ import annotations

import re
from pathlib import Path

from .jobs import REPO


def modules(package_dir: Path) -> list[tuple[str, str]]:
    """Each module of a package as (its room: "" at the top, "policy/", ...; its file name)."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        parts = path.relative_to(package_dir).parts
        found.append(("".join(f"{part}/" for part in parts[:-1]), parts[-1]))
    return found


def contributing_rooms() -> dict[str, str]:
    """CONTRIBUTING.md's operator layout: the text of each room's entry (a top-level `- \\`room/\\``, its sub-items
    included), and of the top-level modules' lines together under ""."""
    text = (REPO / "CONTRIBUTING.md").read_text()
    layout = text[text.index("**The operator, `operator/scaletrain_operator/`**") : text.index("**The trainer,")]
    rooms: dict[str, str] = {"": ""}
    current = ""
    for line in layout.splitlines():
        if match := re.match(r"^- `([a-z_]+/)`", line):
            current = match.group(1)
        elif line.startswith("- "):
            current = ""
        rooms[current] = rooms.get(current, "") + line + "\n"
    return rooms


def trainer_rooms() -> dict[str, str]:
    """docs/trainer.md's table of rooms, each row's text by room, and its opening lines (the entry modules)."""
    text = (REPO / "docs" / "trainer.md").read_text()
    rooms = {"": text[: text.index("| room |")]}
    for match in re.finditer(r"^\| `([a-z_]+/)` \|(.*)$", text, re.MULTILINE):
        rooms[match.group(1)] = match.group(2)
    return rooms


def unmapped(package_dir: Path, rooms: dict[str, str]) -> list[str]:
    return [f"{room}{name}" for room, name in modules(package_dir) if f"`{name}`" not in rooms.get(room, "")]
