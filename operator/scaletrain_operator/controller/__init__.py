"""The controller wing: the kopf operator. Pure decisions (reconcile, status, ttl, the gang policy from
the API wing), the API calls that carry them out (cluster), the kopf wiring (handlers, main), and
operations (settings, metrics, peering, rbac, housekeeping)."""
