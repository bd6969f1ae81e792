"""A script of one's own that shows its progress in `kubectl get stj` by the protocol docs/api.md
describes: rank 0 serves its progress as JSON at /progress on $SCALETRAIN_METRICS_PORT. Each step is
one all-reduce of the gang (gloo, env:// from the rendered rank env). Run with `python`, no torchrun."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
import torch.distributed as dist

STEPS = int(os.environ.get("STEPS", "30"))
SECONDS_PER_STEP = float(os.environ.get("SECONDS_PER_STEP", "0.1"))
progress = {"step": 0, "maxSteps": STEPS}
lock = threading.Lock()


class ProgressHandler(BaseHTTPRequestHandler):
    def do_GET(self):
        with lock:
            body = json.dumps(progress).encode()
        self.send_response(200 if self.path == "/progress" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):  # polled often; keep the log clean
        pass


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        server = ThreadingHTTPServer(("", int(os.environ["SCALETRAIN_METRICS_PORT"])), ProgressHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    total = torch.zeros(1)
    for step in range(1, STEPS + 1):
        value = torch.ones(1)
        dist.all_reduce(value)
        total += value
        time.sleep(SECONDS_PER_STEP)
        with lock:
            now = datetime.now(timezone.utc).isoformat(timespec="seconds")
            progress.update({"step": step, "loss": 1.0 / step, "updatedAt": now})
    print(f"rank {rank}: {STEPS} steps, sum {int(total.item())}", flush=True)
    if rank == 0:  # the final progress, exact: a last read may come a poll before the end
        with lock:
            final = json.dumps(progress)
        # The container's terminationMessagePath; run-local and the tests' kubelet name their stand-in for it.
        with open(os.environ.get("SCALETRAIN_TERMINATION_LOG", "/dev/termination-log"), "w") as message:
            message.write(final)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
