"""The render room: the objects the operator creates for a job (its Job, Services, NetworkPolicy, Workload and
capacity probe) and what it writes on them, as pure functions of the spec."""
