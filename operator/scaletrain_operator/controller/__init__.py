"""The controller room: the kopf operator. The decision steps (reconcile, resizing, restarts, finished) over
what decision.py types, the status, the API calls that carry a Decision out (cluster), the kopf wiring
(handlers, main), and operations (settings, metrics, peering, rbac, housekeeping)."""
