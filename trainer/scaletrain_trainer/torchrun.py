"""torchrun, its imports frozen as the workers' are (startup.py): `python -m scaletrain_trainer.torchrun`
takes exactly torchrun's arguments. The pod's launcher runs it, without depending on PATH."""

from __future__ import annotations

from .startup import frozen_imports

with frozen_imports():
    from torch.distributed.run import main

if __name__ == "__main__":
    main()
