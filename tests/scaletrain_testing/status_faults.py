"""Failures injected into the status writes of ScaleTrainJobs on the tests' real API server: a validating
admission webhook on `scaletrainjobs/status`, served here over HTTPS with a certificate signed by the
cluster's CA, refuses the first writes whose new object matches `when` with a 500 (what a failing API
server or etcd answers), or a 422 (what it answers a status its schema refuses), and allows every other.
The operator's request really fails at the API server, as it would in a cluster; nothing in the operator is
patched.

    with StatusWriteFaults(control_plane, namespace, "demo", tmp_path, when=lambda stj: ...) as faults:
        ...  # the next status write of a job in `namespace` that matches `when` fails once
    faults.refused  # the objects of the writes it refused, with when (time.monotonic())

Only the one namespace is affected (a namespaceSelector), and the webhook is removed on exit.
"""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes.client.rest import ApiException

from scaletrain_operator.api import naming

from .control_plane import ControlPlane
from .kube import RESOURCES, Kube
from .timeouts import WEBHOOK_ARMED_S
from .waiting import wait_until

WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
WEBHOOK_TIMEOUT_S = 5  # the registration's timeoutSeconds: how long the API server waits for the webhook
REFUSALS = {  # the webhook's answers, by code
    500: {"code": 500, "reason": "InternalError", "message": "injected by the test: try again"},
    422: {"code": 422, "reason": "Invalid", "message": "injected by the test: status.progress is invalid"},
}


class StatusWriteFaults:
    """Refuse the first `times` status writes in `namespace` whose new object matches `when` with a 500.
    `probe` is a ScaleTrainJob there: entering waits until a dry-run write of its status reaches the
    webhook, so that every write after that goes through it."""

    def __init__(
        self,
        control_plane: ControlPlane,
        namespace: str,
        probe: str,
        workdir: Path,
        when: Callable[[dict[str, Any]], bool],
        times: int = 1,
        code: int = 500,
    ):
        """`code` 500 answers as a failing API server or etcd would; 422 as the API server answers a status
        that its schema refuses (Invalid)."""
        self.control_plane, self.namespace, self.probe, self.workdir = control_plane, namespace, probe, workdir
        self.when, self.times, self.code = when, times, code
        self.refused: list[tuple[float, dict[str, Any]]] = []
        self.calls = 0
        self.name = f"status-faults-{namespace}"
        self._kube = Kube(control_plane.api_client())
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    def __enter__(self) -> StatusWriteFaults:
        self._serve()
        try:
            self._kube.request("POST", WEBHOOKS, self._configuration())
            self._wait_until_called()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._kube.request("DELETE", f"{WEBHOOKS}/{self.name}")
        except ApiException as error:
            if error.status != 404:  # 404: never created
                raise
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def review(self, request: dict[str, Any]) -> dict[str, Any]:
        """The webhook's answer to one AdmissionReview request."""
        with self._lock:
            self.calls += 1
            refuse = not request.get("dryRun") and len(self.refused) < self.times and self.when(request["object"])
            if refuse:
                self.refused.append((time.monotonic(), request["object"]))
        answer: dict[str, Any] = {"uid": request["uid"], "allowed": not refuse}
        if refuse:
            answer["status"] = REFUSALS[self.code]
        return answer

    def _serve(self) -> None:
        certificate, key = self.control_plane.serving_certificate(self.workdir, "status-faults")
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(certificate, key)
        faults = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # the API server keeps its connection to a webhook open

            def do_POST(self) -> None:  # noqa: N802
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                body = json.dumps(review | {"response": faults.review(review["request"])}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, name="status-faults", daemon=True).start()

    def _configuration(self) -> dict[str, Any]:
        port = self._server.server_address[1]
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [
                {
                    "name": "status-faults.scaletrain.io",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}/review",
                        "caBundle": base64.b64encode(self.control_plane.ca_bundle).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": [naming.GROUP],
                            "apiVersions": [naming.VERSION],
                            "operations": ["UPDATE"],  # a PATCH is an UPDATE to admission
                            "resources": [f"{naming.PLURAL}/status"],
                            "scope": "Namespaced",
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
                    "failurePolicy": "Fail",
                    "sideEffects": "None",  # so dry-run requests reach it too
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": WEBHOOK_TIMEOUT_S,
                }
            ],
        }

    def _wait_until_called(self) -> None:
        """Dry-run status writes of the probe job until the webhook sees one (dry runs are never refused)."""
        path = RESOURCES["stj"].path(self.namespace, self.probe, "status")

        def called() -> bool:
            self._kube.request("PATCH", path, {"status": {}}, [("dryRun", "All")], "application/merge-patch+json")
            return self.calls > 0

        wait_until(called, WEBHOOK_ARMED_S, f"the API server to call the webhook {self.name}", interval_s=0.2)
