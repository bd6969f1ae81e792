"""`scaletrain-operator`: run the kopf operator for ScaleTrainJobs."""

from __future__ import annotations

import argparse
import logging
import resource
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import kopf

from . import handlers, peering  # noqa: F401  (importing handlers registers them with kopf)
from .settings import OperatorConfig

# The API server stores a custom resource nested up to its JSON decoder's limit (Go's encoding/json:
# 10,000 levels), preserve-unknown-fields subtrees included. kopf decodes every watch event with
# json.loads, which gives up at Python's recursion limit (1,000 by default): a single deep object ended
# the watch, and with it the operator, for every namespace. Sized to decode, compare and copy any object
# the API server can hold (each level costs up to two frames, e.g. in copy.deepcopy), and the C stacks
# to carry that (about 200 bytes a level); validation/bounds.py then refuses the spec with its field path.
API_SERVER_MAX_NESTING = 10_000
RECURSION_LIMIT = 2 * API_SERVER_MAX_NESTING + 1_000
STACK_BYTES = 32 * 1024 * 1024  # for the main thread (kopf's event loop) and every thread started later


def decode_anything_the_api_server_stores() -> None:
    """Raise the recursion limit and the stack sizes so that no object the API server serves can make a
    decode fail (RecursionError) or overflow a thread's stack."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    threading.stack_size(STACK_BYTES)
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if soft != resource.RLIM_INFINITY and soft < STACK_BYTES:  # the main thread's stack grows up to it
        wanted = STACK_BYTES if hard == resource.RLIM_INFINITY else min(STACK_BYTES, hard)
        resource.setrlimit(resource.RLIMIT_STACK, (wanted, hard))


def quiet_kopf_objects(verbose: bool) -> None:
    """kopf logs every handler call that succeeded at INFO: a line per watch event (some 20,000 for 1000 new
    jobs, and a twentieth of its event loop's time). The operator logs what it does itself, so kopf's lines
    about objects show from WARNING on, unless --verbose."""
    logging.getLogger("kopf.objects").setLevel(logging.NOTSET if verbose else logging.WARNING)


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
        "--progress-write-interval",
        type=float,
        help="the most seconds a running job's status.progress lags rank 0's newest answer (news goes at once; "
        "default 60)",
    )
    parser.add_argument(
        "--network-policy-from",
        metavar="NAMESPACE",
        help="give each job a NetworkPolicy: its pods accept only each other, and the operator's pods in "
        "NAMESPACE on the metrics port",
    )
    parser.add_argument(
        "--probe-priority-class",
        metavar="NAME",
        help="the PriorityClass of elastic gangs' capacity probes: one with preemptionPolicy Never (the chart "
        "makes it), so that a probe never preempts a pod",
    )
    reports = parser.add_argument_group("status reports", "the HTTPS endpoint scripts of one's own push progress to")
    reports.add_argument("--status-reports-port", type=int, help="serve it on this port (0: off, the default)")
    reports.add_argument(
        "--status-reports-url", metavar="URL", help="https://HOST[:PORT], as pods reach it (the chart's Service)"
    )
    reports.add_argument(
        "--status-reports-tls-dir", metavar="DIR", help="its certificate and key (tls.crt, tls.key) and CA (ca.crt)"
    )
    reports.add_argument(
        "--agent-image",
        metavar="IMAGE",
        help="an image with ScaleTrain (the operator's): its init container brings a script of one's own the agent "
        "that restarts its gang in place; none: such gangs are recreated",
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
    if args.progress_write_interval is not None:
        config = replace(config, progress_write_interval_seconds=args.progress_write_interval)
    if args.network_policy_from is not None:
        config = replace(config, network_policy_from=args.network_policy_from)
    if args.probe_priority_class is not None:
        config = replace(config, probe_priority_class=args.probe_priority_class)
    for name in ("status_reports_port", "status_reports_url", "status_reports_tls_dir", "agent_image"):
        if getattr(args, name) is not None:
            config = replace(config, **{name: getattr(args, name)})
    if args.peering:
        identity, priority = peering.new_identity(), peering.new_priority()
        config = replace(config, peering=args.peering, peering_identity=identity, peering_priority=priority)
    return config


def status_reports_problem(config: OperatorConfig) -> str | None:
    """What keeps the status-report endpoint from being served as configured, in words, or None."""
    if not config.status_reports_port:
        return None
    if not config.status_reports_url.startswith("https://"):
        return "--status-reports-url must be https://HOST[:PORT], as pods reach the endpoint (the chart's Service)"
    tls = Path(config.status_reports_tls_dir)
    missing = [name for name in ("tls.crt", "tls.key", "ca.crt") if not (tls / name).is_file()]
    if missing:
        return (
            f"--status-reports-tls-dir {str(tls)!r} lacks {', '.join(missing)}: mount the chart's Secret "
            "RELEASE-status-reports there, or turn the endpoint off with --status-reports-port=0"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = operator_config(args)
    if (problem := status_reports_problem(config)) is not None:
        parser.error(problem)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    quiet_kopf_objects(args.verbose)
    decode_anything_the_api_server_stores()
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
