"""High availability with kopf peering: replicas share a (Cluster)KopfPeering object, and kopf pauses
every replica that sees a live peer of higher *or equal* priority. Equal priorities would pause them
all, so each replica takes a random priority at start: the highest is the one active operator, the
others stand by and take over once its record expires (its lifetime, 60 s) or it leaves on shutdown.

kopf pauses only its own watches; the operator's housekeeping thread (progress, TTL) asks `is_active`
so that a standby stays passive too.
"""

from __future__ import annotations

import os
import random
import secrets
import socket
from datetime import datetime, timedelta
from typing import Any

KOPF_GROUP = "kopf.dev"
KOPF_VERSION = "v1"
IDENTITY_ENV = "POD_ID"  # kopf's own: the identity it writes into the peering object


def new_identity() -> str:
    """This replica's identity: the pod name (the hostname in a pod), the pid, and a random part."""
    return os.environ.get(IDENTITY_ENV) or f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"


def new_priority() -> int:
    return random.SystemRandom().randint(1, 2**31 - 1)


def is_active(peering_status: dict[str, Any], identity: str, priority: int, now: datetime) -> bool:
    """Whether this replica is the active one: no other live peer has a priority as high as its own."""
    for peer, record in peering_status.items():
        if peer == identity or not isinstance(record, dict):
            continue
        lastseen = datetime.fromisoformat(str(record.get("lastseen")))
        if (
            lastseen + timedelta(seconds=int(record.get("lifetime", 60))) > now
            and record.get("priority", 0) >= priority
        ):
            return False
    return True
