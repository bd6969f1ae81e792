"""A training loop of one's own that reports its progress as the Kubeflow SDK's update_trainjob_status() does
(a POST of the status protocol to KUBEFLOW_TRAINER_SERVER_URL), `--reports` times, every `--interval` seconds,
then stops reporting and sleeps: stuck, as a loop waiting on a dead peer would be. A report that is refused or
fails is dropped, as HF's callback drops it."""

from __future__ import annotations

import argparse
import json
import os
import ssl
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

parser = argparse.ArgumentParser()
parser.add_argument("--reports", type=int, default=3)
parser.add_argument("--interval", type=float, default=1.0)
args = parser.parse_args()


def update_trainjob_status(step: int, total: int, loss: float) -> int | str:
    token = open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read().strip()
    status = {
        "lastUpdatedTime": datetime.now(timezone.utc).isoformat(),
        "progressPercentage": 100 * step // total,
        "metrics": [{"name": "current_step", "value": str(step)}, {"name": "total_steps", "value": str(total)},
                    {"name": "loss", "value": str(loss)}],
    }  # fmt: skip
    request = urllib.request.Request(
        os.environ["KUBEFLOW_TRAINER_SERVER_URL"],
        data=json.dumps({"trainerStatus": status}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    context = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code
    except OSError as error:
        return str(error)


for step in range(1, args.reports + 1):
    print(f"step {step}: report answered {update_trainjob_status(step, 100, 5.0 / step)}", flush=True)
    time.sleep(args.interval)
print("stuck", flush=True)
time.sleep(3600)
