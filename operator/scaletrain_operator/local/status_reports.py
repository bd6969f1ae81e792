"""run-local's side of the status-report endpoint (report_server.py): a script of one's own reports here as it
would to the operator, with the same three variables (render/status_reports.py), over HTTPS to this machine as the
pods reach it. In place of the kubelet's projected token and the API server's TokenReview, each pod gets a random
token of its own, written with the CA into the directory its volume mounts."""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import threading
from pathlib import Path
from types import TracebackType

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..api.job import ScaleTrainJob
from ..in_place import InPlaceGangs
from ..render.status_reports import Endpoint
from ..report_server import Key, Refused, Reports, Sender, StatusServer
from .pod_network import free_port

VALIDITY = datetime.timedelta(days=1)  # a run's; the CA is made anew for each


class LocalReports:
    """The endpoint for one run: served on `address` (the host as the pods see it) while the block runs."""

    def __init__(self, job: ScaleTrainJob, address: str, directory: Path):
        self.job: Key = (job.metadata.namespace or "default", job.name)
        self.directory = directory
        tls = serving_pki(directory / "tls", address)
        port = free_port()
        self.endpoint = Endpoint(f"https://{address}:{port}", (tls / "ca.crt").read_text())
        self.reports = Reports()
        self._tokens: dict[str, tuple[int, int]] = {}  # each pod's token, to its gang generation and rank
        self.said = threading.Event()  # set when a pod's agent says its workload ended: judge the gang now
        self.in_place = InPlaceGangs(on_outcome=lambda job: self.said.set())
        self._server = StatusServer(port, str(tls), self, self.reports, self.in_place, lambda: True, address)

    def __enter__(self) -> LocalReports:
        self._server.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None):
        self._server.stop()

    def pod_volume(self, pod_name: str, gang_generation: int, rank: int) -> Path:
        """The directory the pod's status-report volume mounts: its own token, and the CA."""
        token = secrets.token_urlsafe(32)
        self._tokens[token] = (gang_generation, rank)
        volume = self.directory / "pods" / pod_name
        volume.mkdir(parents=True, exist_ok=True)
        (volume / "token").write_text(token)
        (volume / "ca.crt").write_text(self.endpoint.ca_pem)
        return volume

    def sender(self, token: str, address: str) -> Sender:
        """Its own tokens are known without a review, wherever on this machine they come from."""
        if token not in self._tokens:
            raise Refused(401, "not a token run-local gave a pod of this job")
        return Sender(self.job, *self._tokens[token])

    def progress(self, gang_generation: int) -> dict | None:
        """What the gang last reported, every field at its newest value; None before it reported."""
        report = self.reports.newest(self.job)
        return report.progress if report is not None and report.gang_generation == gang_generation else None


def serving_pki(directory: Path, address: str) -> Path:
    """A CA of its own and a serving certificate for the IP `address`, signed by it: DIRECTORY/ca.crt, tls.crt and
    tls.key, as a kubernetes.io/tls Secret mounts them (what report_server.StatusServer reads)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "scaletrain status reports CA")])
    start = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)

    def certificate(subject: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
        builder = x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(public_key)
        return (
            builder.serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(start + VALIDITY)
        )

    ca = (
        certificate(ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        certificate(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)]), key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.crt").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (directory / "tls.key").write_bytes(private)
    (directory / "tls.key").chmod(0o600)
    return directory
