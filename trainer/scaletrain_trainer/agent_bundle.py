"""The agent (agent.py) as one file that any Python 3.10 or later runs with its standard library alone, for the pods
of a script of one's own, whose image need not have ScaleTrain in it: a zip application of the agent and the few
modules it imports. An init container from the operator's image writes it onto the agent's emptyDir, and the
workload's container runs it there (render/in_place.py in the operator):

    python -m scaletrain_trainer.agent_bundle DIR     # writes DIR/agent.pyz
    python3 DIR/agent.pyz -- COMMAND...               # the agent, running COMMAND
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from .contract import wire

# The agent's own imports, all torch- and pydantic-free; the packages' __init__ modules are left empty in the bundle.
MODULES = ("agent.py", "stop_signals.py", "contract/wire.py", "contract/exit_codes.py")
PACKAGES = ("", "contract/")
MAIN = "import sys\n\nfrom scaletrain_trainer.agent import main\n\nsys.exit(main(sys.argv[1:]))\n"


def write_bundle(directory: Path) -> Path:
    """DIR/agent.pyz, written whole or not at all (a restarted init container writes it again)."""
    package = Path(__file__).resolve().parent
    path = directory / wire.AGENT_BUNDLE
    partial = path.with_name(f".{wire.AGENT_BUNDLE}.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("__main__.py", MAIN)
        for inner in PACKAGES:
            bundle.writestr(f"scaletrain_trainer/{inner}__init__.py", "")
        for module in MODULES:
            bundle.write(package / module, f"scaletrain_trainer/{module}")
    partial.replace(path)
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m scaletrain_trainer.agent_bundle DIRECTORY", file=sys.stderr)
        return 2
    print(f"scaletrain agent: wrote {write_bundle(Path(argv[0]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
