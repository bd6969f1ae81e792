"""A third-party script that relies on its working directory: it reads `settings.txt` and writes
`results/rank-N.txt`, both relative to where it runs."""

from __future__ import annotations

import os
from pathlib import Path

greeting = Path("settings.txt").read_text().strip()
Path("results").mkdir(exist_ok=True)
Path("results", f"rank-{os.environ['NODE_RANK']}.txt").write_text(f"{greeting} from {os.environ['HOSTNAME']}\n")
print(f"wrote results/rank-{os.environ['NODE_RANK']}.txt in {os.getcwd()}", flush=True)
