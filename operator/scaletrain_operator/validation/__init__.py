"""The validation room: every check of a spec beyond its types (its cross-field rules, bounds, Kubernetes' rules and
schemas, the merged pod, elastic sizes) and of what rank 0 reports, shared by validate, render, run-local and the
operator."""
