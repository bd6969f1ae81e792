"""The policy room: the pure decisions the operator and run-local share: the gang policy, the restart ledger,
elastic sizing, placement, node exclusion, hang detection, and the readers of pods and Jobs they judge by."""
