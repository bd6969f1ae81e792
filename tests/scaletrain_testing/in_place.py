"""The operator's in-place endpoint on loopback, for tests that play the operator's part (in_place.py) against real
agents (agent.py): the status-report server over real TLS, with a token per rank instead of TokenReviews."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from scaletrain_operator.in_place import InPlaceGangs
from scaletrain_operator.local.pod_network import free_port
from scaletrain_operator.local.status_reports import serving_pki
from scaletrain_operator.report_server import Refused, Reports, Sender, StatusServer
from scaletrain_trainer.contract import wire

JOB = ("team-a", "demo")
AGENT = (sys.executable, "-m", "scaletrain_trainer.agent", "--")


class RankTokens:
    """Senders by token: "rank-N" is rank N's pod of JOB's gang 0."""

    def sender(self, token: str, address: str) -> Sender:
        rank = token.removeprefix("rank-")
        if not token.startswith("rank-") or not rank.isdigit():
            raise Refused(401, "not a token of ours")
        return Sender(JOB, 0, int(rank))


@dataclass
class Endpoint:
    gangs: InPlaceGangs
    url: str
    ca: Path
    directory: Path

    def pod_env(self, rank: int) -> dict[str, str]:
        """The env an agent of rank `rank` runs with: the channel, its token and state files, its own
        termination message."""
        pod = self.directory / f"pod-{rank}"
        pod.mkdir(exist_ok=True)
        (pod / "token").write_text(f"rank-{rank}")
        return os.environ | {
            wire.IN_PLACE_URL_ENV: self.url,
            wire.REPORT_TOKEN_ENV: str(pod / "token"),
            wire.REPORT_CA_ENV: str(self.ca),
            wire.IN_PLACE_STATE_ENV: str(pod / "state" / "generation"),
            wire.TERMINATION_LOG_ENV: str(pod / "termination-log"),
            wire.GENERATION_ENV: "0",
        }


@contextmanager
def in_place_endpoint(directory: Path, gangs: InPlaceGangs | None = None) -> Iterator[Endpoint]:
    tls, port = serving_pki(directory / "tls", "127.0.0.1"), free_port()
    gangs = gangs if gangs is not None else InPlaceGangs()
    server = StatusServer(port, str(tls), RankTokens(), Reports(), gangs, lambda: True, "127.0.0.1")
    server.start()
    try:
        yield Endpoint(gangs, f"https://127.0.0.1:{port}{wire.IN_PLACE_PATH}", tls / "ca.crt", directory)
    finally:
        server.stop()
