"""The `scaletrain` command: validate, render and inspect ScaleTrainJobs without a cluster, or run one here."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from scaletrain_trainer.contract.documents import EXPONENT_FLOAT, DocumentError, load_documents, read_bounded
from scaletrain_trainer.contract.validation import Problem, ProblemsError

from .api.crd import crd_yaml
from .api.job import ScaleTrainJob, parse_job
from .api.naming import MAX_RESTARTS, whole_number
from .convert import ConversionError, Finding, convert
from .render.children import render_children, render_job
from .validation.kube_rules import is_dns_label

EXIT_INVALID = 1
EXIT_USAGE = 2


class InputError(Exception):
    """A file that cannot be read or parsed; the message says which and why."""


def read_documents(path: str) -> list[Any]:
    """The YAML documents in `path` ("-" for stdin), skipping empty ones."""
    try:
        if path == "-":
            text = read_bounded(getattr(sys.stdin, "buffer", sys.stdin), "stdin")
        else:
            with Path(path).open("rb") as file:
                text = read_bounded(file, path)
        documents = load_documents(text, path)
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    except DocumentError as error:
        raise InputError(str(error)) from None
    if not documents:
        raise InputError(f"{path}: no YAML document found")
    return documents


def load_jobs(path: str) -> list[ScaleTrainJob]:
    """Every ScaleTrainJob in `path`; raises ProblemsError with all problems of all documents."""
    jobs, problems = [], []
    documents = read_documents(path)
    for index, document in enumerate(documents):
        try:
            jobs.append(parse_job(document))
        except ProblemsError as error:
            prefix = (f"document {index + 1}",) if len(documents) > 1 else ()
            problems.extend(Problem(prefix + p.path, p.message) for p in error.problems)
    if problems:
        raise ProblemsError(problems)
    return jobs


def namespace(text: str) -> str:
    """-n: a namespace name is a DNS label."""
    if not is_dns_label(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a namespace name (a DNS label: a-z, 0-9 and -)")
    return text


def workdir(text: str) -> Path:
    """--workdir: an empty one would be the current directory, which --fresh would clean."""
    if not text.strip():
        raise argparse.ArgumentTypeError("give a directory (it is empty); the default is scaletrain-runs/NAME")
    return Path(text)


def positive_count(text: str) -> int:
    """--nodes-available: a whole number of nodes, at least 1."""
    count = whole_number(text.strip())
    if count is None or count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of nodes; give a whole number, at least 1")
    return count


def bound_claim(text: str) -> tuple[str, Path]:
    """--claim CLAIM=DIR: a PersistentVolumeClaim's volume, a directory that exists."""
    claim, equals, directory = text.partition("=")
    if not (claim.strip() and equals and directory.strip()):
        raise argparse.ArgumentTypeError(f"{text!r} is not CLAIM=DIR; give a claim's name and a directory")
    if not Path(directory).is_dir():
        raise argparse.ArgumentTypeError(f"{directory!r} (for claim {claim}) is not a directory")
    return claim, Path(directory)


def mounted_claims(job: ScaleTrainJob) -> set[str]:
    """The PersistentVolumeClaims of the job's pods, from spec.volumes and the podTemplate's alike."""
    volumes = render_job(job)["spec"]["template"]["spec"].get("volumes") or []
    return {volume["persistentVolumeClaim"]["claimName"] for volume in volumes if "persistentVolumeClaim" in volume}


def cmd_validate(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            jobs = load_jobs(path)
        except InputError as error:  # as render and run-local: an input that is not a job at all
            print(f"scaletrain: {error}", file=sys.stderr)
            status = max(status, EXIT_USAGE)
            continue
        except ProblemsError as error:
            _print_problems(path, error.problems)
            status = max(status, EXIT_INVALID)
            continue
        for job in jobs:
            spec = job.spec
            runs = (
                f"{spec.training.accumulation_steps(spec.world_size)} accumulation step(s) per optimizer step"
                if spec.training is not None
                else "its own command, without a training block"
            )
            print(
                f"{path}: ScaleTrainJob {job.name} is valid: {spec.nodes} node(s) × "
                f"{spec.resolved_procs_per_node} process(es) = "
                f"world size {spec.world_size}, backend {spec.resolved_backend}, {runs}"
            )
    return status


class KubernetesDumper(yaml.SafeDumper):
    """Quotes the strings Kubernetes' YAML reader would take for numbers (`2e-5`, which YAML 1.1 does not):
    an argument or env value written plain would come back as a float."""


KubernetesDumper.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+.0123456789"))


def cmd_render(args: argparse.Namespace) -> int:
    jobs = load_jobs(args.file)
    children = [child for job in jobs for child in render_children(job, args.generation, args.namespace)]
    for job in jobs:
        if job.metadata.uid is None:
            print(
                f"# {job.name}: ownerReferences omitted: metadata.uid is assigned by the API server "
                "(the operator sets them)",
                file=sys.stderr,
            )
    sys.stdout.write(yaml.dump_all(children, Dumper=KubernetesDumper, sort_keys=False, width=120))
    return 0


def cmd_run_local(args: argparse.Namespace) -> int:
    jobs = load_jobs(args.file)
    if len(jobs) != 1:
        raise InputError(f"{args.file}: run-local runs one ScaleTrainJob; found {len(jobs)}")
    for module in ("torch", "rich"):
        if importlib.util.find_spec(module) is None:
            raise InputError(
                f"run-local needs the trainer's dependencies ({module} is missing): pip install 'scaletrain[train]'"
            )
    from .local.gang import run_local  # imports torch lazily; keep `render` and `validate` light

    (job,) = jobs
    bound_claims = dict(args.claim)
    claims = mounted_claims(job)
    if unmounted := sorted(bound_claims.keys() - claims):
        named = ", ".join(sorted(claims)) or "none"
        raise InputError(
            f"run-local: --claim {unmounted[0]}=...: {args.file} mounts no such claim (its claims: {named})"
        )
    try:
        workdir = args.workdir or Path("scaletrain-runs") / job.name
        return run_local(
            job, workdir, fresh=args.fresh, nodes_available=args.nodes_available, bound_claims=bound_claims
        )
    except OSError as error:  # a command that does not exist, a workdir that cannot be written, ...
        raise InputError(f"run-local: {error}") from None


def cmd_convert(args: argparse.Namespace) -> int:
    try:
        conversion = convert(read_documents(args.file))
    except ConversionError as error:
        _print_findings(f"{args.file}: cannot convert to a ScaleTrainJob", error.findings)
        return EXIT_INVALID
    if conversion.unmapped:
        _print_findings(f"{args.file}: not carried over to the ScaleTrainJob", conversion.unmapped)
    sys.stdout.write(yaml.dump(conversion.job, Dumper=KubernetesDumper, sort_keys=False, width=120))
    return 0


def cmd_crd(args: argparse.Namespace) -> int:
    sys.stdout.write(crd_yaml())
    return 0


def _generation(text: str) -> int:
    generation = whole_number(text)
    if generation is None or generation > MAX_RESTARTS:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {MAX_RESTARTS}, got {text!r}")
    return generation


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scaletrain", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    render = commands.add_parser("render", help="print the Kubernetes objects the operator creates for a job")
    render.add_argument("file", help="ScaleTrainJob YAML file, or - for stdin")
    render.add_argument(
        "-n", "--namespace", type=namespace, help="namespace of the children (default: the job's, else default)"
    )
    render.add_argument(
        "--generation", type=_generation, default=0, help="gang restart generation to render (default 0)"
    )
    render.set_defaults(handler=cmd_render)

    validate = commands.add_parser("validate", help="check ScaleTrainJob files; list every problem with its field")
    validate.add_argument("files", nargs="+", help="ScaleTrainJob YAML files, or - for stdin")
    validate.set_defaults(handler=cmd_validate)

    run_local = commands.add_parser(
        "run-local", help="run a job on this machine as the cluster would: one torchrun per node, gang restarts"
    )
    run_local.add_argument("file", help="ScaleTrainJob YAML file (CPU jobs, or GPU jobs that fit this machine's GPUs)")
    run_local.add_argument(
        "--workdir",
        type=workdir,
        help="volumes, checkpoints and logs go here, one run at a time (default: scaletrain-runs/NAME)",
    )
    run_local.add_argument(
        "--fresh",
        action="store_true",
        help="delete what an earlier run left in the workdir (its logs, volumes and pods) instead of resuming from it",
    )
    run_local.add_argument(
        "--nodes-available",
        type=positive_count,
        metavar="K",
        help="run as a cluster with only K nodes for the job would: an elastic gang (spec.elastic) at the largest "
        "size that fits, keeping the global batch exact",
    )
    run_local.add_argument(
        "--claim",
        type=bound_claim,
        action="append",
        default=[],
        metavar="CLAIM=DIR",
        help="the PersistentVolumeClaim CLAIM is this directory (data or a model already on it), instead of a new "
        "empty one in the workdir; --fresh leaves it alone. Repeatable",
    )
    run_local.set_defaults(handler=cmd_run_local)

    convert_ = commands.add_parser(
        "convert",
        help="print the ScaleTrainJob for a Kubeflow PyTorchJob, or a TrainJob with its runtime in the same file; "
        "list on stderr what it does not carry over",
    )
    convert_.add_argument("file", help="PyTorchJob or TrainJob (+ runtime) YAML file, or - for stdin")
    convert_.set_defaults(handler=cmd_convert)

    crd = commands.add_parser("crd", help="print the ScaleTrainJob CustomResourceDefinition")
    crd.set_defaults(handler=cmd_crd)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except InputError as error:
        print(f"scaletrain: {error}", file=sys.stderr)
        return EXIT_USAGE
    except ProblemsError as error:
        _print_problems(args.file, error.problems)
        return EXIT_INVALID


def _print_findings(header: str, findings: Sequence[Finding]) -> None:
    print(f"{header} ({len(findings)}):", file=sys.stderr)
    for finding in findings:
        print(f"  {finding}", file=sys.stderr)


def _print_problems(path: str, problems: Sequence[Problem]) -> None:
    count = len(problems)
    print(f"{path}: invalid ScaleTrainJob ({count} problem{'s' * (count != 1)})", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
