"""`scaletrain-operator`: run the kopf operator for ScaleTrainJobs."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from . import peering
from .settings import ENV_PREFIX


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scaletrain-operator", description=__doc__)
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], help="watch this namespace (repeatable)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (the default)")
    ha = parser.add_mutually_exclusive_group()
    ha.add_argument(
        "--peering",
        metavar="NAME",
        help="kopf peering: of the replicas sharing NAME one is active, the others stand by",
    )
    ha.add_argument("--standalone", action="store_true", help="no peering (a single replica; the default)")
    parser.add_argument("--liveness-port", type=int, default=8081, help="serve /healthz here (0: off)")
    parser.add_argument("--metrics-port", type=int, default=8080, help="serve Prometheus /metrics here (0: off)")
    parser.add_argument("--progress-interval", type=float, help="seconds between progress polls of running jobs")
    parser.add_argument("--verbose", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ[ENV_PREFIX + "NAMESPACES"] = ",".join(args.namespace)
    os.environ[ENV_PREFIX + "METRICS_PORT"] = str(args.metrics_port)
    if args.progress_interval is not None:
        os.environ[ENV_PREFIX + "PROGRESS_INTERVAL_SECONDS"] = str(args.progress_interval)
    priority = None
    if args.peering:
        identity, priority = peering.new_identity(), peering.new_priority()
        os.environ[peering.IDENTITY_ENV] = identity  # kopf's identity in the peering object
        os.environ[ENV_PREFIX + "PEERING"] = args.peering
        os.environ[ENV_PREFIX + "PEERING_IDENTITY"] = identity
        os.environ[ENV_PREFIX + "PEERING_PRIORITY"] = str(priority)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)

    import kopf  # after the environment is set: the handlers read their settings on import

    from . import handlers  # noqa: F401  (registers the handlers)

    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        standalone=args.peering is None,
        peering_name=args.peering,
        priority=priority,
        liveness_endpoint=f"http://0.0.0.0:{args.liveness_port}/healthz" if args.liveness_port else None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
