"""ScaleTrain trainer: what every pod runs under torchrun.

Four rooms: `contract` (torch-free; the only part the operator imports), `training`, `models` and
`reporting`. The entry modules pods and docs name stay at the top: `__main__`, `launch`, `torchrun`,
`startup` and `export`.
"""

__version__ = "0.1.0"
