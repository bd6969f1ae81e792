"""`scaletrain-operator`: run the kopf operator for ScaleTrainJobs."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace

import kopf

from . import handlers, peering  # noqa: F401  (importing handlers registers them with kopf)
from .settings import OperatorConfig


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
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics here (0: off; default 8080)")
    parser.add_argument("--progress-interval", type=float, help="seconds between progress polls of running jobs")
    parser.add_argument(
        "--network-policy-from",
        metavar="NAMESPACE",
        help="give each job a NetworkPolicy: its pods accept only each other, and the operator's pods in "
        "NAMESPACE on the metrics port",
    )
    parser.add_argument("--verbose", action="store_true")
    return parser


def operator_config(args: argparse.Namespace) -> OperatorConfig:
    """The settings: SCALETRAIN_OPERATOR_* from the environment, overridden by the command line."""
    config = OperatorConfig.from_env()
    if args.namespace or args.all_namespaces:
        config = replace(config, namespaces=args.namespace)
    if args.metrics_port is not None:
        config = replace(config, metrics_port=args.metrics_port)
    if args.progress_interval is not None:
        config = replace(config, progress_interval_seconds=args.progress_interval)
    if args.network_policy_from is not None:
        config = replace(config, network_policy_from=args.network_policy_from)
    if args.peering:
        identity, priority = peering.new_identity(), peering.new_priority()
        config = replace(config, peering=args.peering, peering_identity=identity, peering_priority=priority)
    return config


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = operator_config(args)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    kopf.run(
        clusterwide=not config.namespaces,
        namespaces=config.namespaces,
        standalone=not config.peering,
        peering_name=config.peering or None,
        priority=config.peering_priority,
        identity=config.peering_identity or None,
        liveness_endpoint=f"http://0.0.0.0:{args.liveness_port}/healthz" if args.liveness_port else None,
        memo=kopf.Memo(config=config),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
