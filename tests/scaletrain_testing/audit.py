"""The API server's audit log: every request it answered, by whom, with what verb on which resource and
which status code. The tests count the operator's requests here (its writes, its reads per job, the
permissions it used), on the server's side of the wire, without instrumenting the operator."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# Level Metadata, at ResponseComplete only: one line per request, no bodies.
POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted, Panic]
rules:
  - level: Metadata
"""
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(frozen=True)
class Request:
    verb: str  # get, list, watch, create, patch, update, delete, ...
    resource: str  # resource.group[/subresource], as controller/rbac.py names permissions
    namespace: str | None
    name: str | None
    code: int  # the response's HTTP status
    dry_run: bool = False  # made nowhere (the operator's probe of the restart rule): no write
    user: str = ""  # who made it

    @property
    def is_write(self) -> bool:
        return self.verb in WRITES and not self.dry_run


class AuditLog:
    def __init__(self, path: Path):
        self.path = path

    def mark(self) -> int:
        """A position: `requests(after=mark)` then counts only later requests."""
        return self.path.stat().st_size if self.path.exists() else 0

    def requests(self, user: str | None, after: int = 0, settle_seconds: float = 0.5) -> list[Request]:
        """The resource requests `user` (None: anyone) made since `after` (discovery and other non-resource paths
        left out). Waits `settle_seconds` first: the server logs a request once its response is complete."""
        time.sleep(settle_seconds)
        with self.path.open("rb") as log:
            log.seek(after)
            lines = log.read().splitlines()
        found = []
        for line in lines:
            event = json.loads(line)
            target = event.get("objectRef")
            made_by = event["user"]["username"]
            if user not in (None, made_by) or not target or "resource" not in target:
                continue
            resource = f"{target['resource']}.{target['apiGroup']}" if target.get("apiGroup") else target["resource"]
            if target.get("subresource"):
                resource += f"/{target['subresource']}"
            code = event.get("responseStatus", {}).get("code", 0)
            dry_run = "dryRun=All" in event.get("requestURI", "")
            found.append(
                Request(event["verb"], resource, target.get("namespace"), target.get("name"), code, dry_run, made_by)
            )
        return found


def counts(requests: list[Request]) -> Counter[tuple[str, str]]:
    """(verb, resource) → how many; a dry run's verb as "create (dry run)"."""
    return Counter((f"{r.verb} (dry run)" if r.dry_run else r.verb, r.resource) for r in requests)
