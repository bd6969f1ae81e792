"""`scaletrain run-local FILE`: run a ScaleTrainJob on this machine, the way the cluster runs it.

Each node is one of the job's rendered pods, run by the pod executor (executor.py) as a kubelet
would: one torchrun per node with the pod's env, gloo on CPU, nccl with a slice of this machine's
GPUs per node. As root each pod has a network namespace of its own; otherwise the pods share this
machine's loopback (SCALETRAIN_POD_NETWORK=auto, namespaces or loopback chooses; the run says which).
As root each container has a filesystem of its own too, with the volumes at their mountPaths;
otherwise the pods write this machine's files (SCALETRAIN_POD_FILESYSTEM=auto, contained or shared).
The gang policy (policy/gang_policy.py) judges the pods exactly as the operator does: a failed node
stops the others and the gang restarts from the last checkpoint, up to maxRestarts; exit code 78 (an
invalid training config) and a passed activeDeadlineSeconds (per gang generation) are final. The built-in
trainer's gang restarts in place (render/in_place.py): each pod's agent is told over run-local's status-report
endpoint, and the executor restarts the pod's containers where they stand, keeping its filesystem and network;
a script of one's own gets new pods. Every process is stopped on the way out, also on Ctrl-C, SIGTERM or SIGHUP, and a
second interrupt cannot cut the stopping short. Volumes are directories under the workdir, which one
run at a time holds (a second one would interleave the metrics and trip over the first's checkpoints).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from scaletrain_trainer.contract.validation import Problem, ProblemsError

from ..api import naming
from ..api.conditions import DEADLINE_EXCEEDED, START_ERROR, GangEnding, PodPhase
from ..api.job import ScaleTrainJob
from ..api.job_status import GangRecord
from ..in_place import as_said_by_agents
from ..policy import elastic
from ..policy.gang_policy import (
    Action,
    GangLimits,
    PodOutcome,
    Verdict,
    crash_loop_length,
    ended_gang,
    judge,
    kept,
    pod_outcome,
    restart_backoff,
)
from ..policy.ledger import Ledger
from ..progress import read_progress
from ..render.children import render_job, render_master_alias, render_service
from ..render.in_place import restarting_in_place, restarts_in_place
from ..render.status_reports import VOLUME, pushes_reports, reporting_to
from ..validation import elastic_sizes
from .executor import PodExecutor, PodExtras, RunningPod, stop_pods
from .job_controller import indexed_pods
from .pod_filesystem import FilesystemError, PodFilesystem, open_filesystem
from .pod_network import AUTO, NetworkError, PodNetwork, free_port, open_network
from .pod_spec import Pod
from .report import RunResult, metrics_records, summary
from .status_reports import LocalReports
from .view import ProgressView

POLL_SECONDS = 0.25
# After the word to restart in place, the pods are polled this often, for at most so long, until each restarted.
RESTART_POLL_SECONDS, RESTART_POLL_INTERVAL = 5.0, 0.02
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, kill, a closed terminal
WORKDIR_PARTS = ("logs", "volumes", "pods")  # what run-local writes under the workdir (and --fresh removes)
POD_NETWORK_ENV = "SCALETRAIN_POD_NETWORK"  # auto (the default), namespaces or loopback
POD_FILESYSTEM_ENV = "SCALETRAIN_POD_FILESYSTEM"  # auto (the default), contained or shared
LOCK_FILE = ".run-local.lock"  # in the workdir: locked while a run holds it, with the holder's pid
# No image brings a script of one's own the agent here: its gang is recreated. The executor refuses a command it
# cannot start before the pod runs, a clear error at once, which an agent in front of the command would turn into
# a failed workload.
LOCAL_AGENT_IMAGE = ""


class WorkdirBusy(OSError):
    """Another run holds the workdir; the message names it, the holder's pid and what to do."""


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum  # the shell's convention: 130 for Ctrl-C, 143 for SIGTERM


def count_gpus() -> int:
    import torch  # only here: the rest of the command line needs no torch

    return torch.cuda.device_count()


def visible_gpus() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else all of them."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [device for device in visible.split(",") if device.strip()]
    return [str(index) for index in range(count_gpus())]


def check_fits_this_machine(job: ScaleTrainJob, gpus_here: int) -> None:
    spec = job.spec
    if not spec.gpus_per_node:
        return
    needed = spec.nodes * spec.gpus_per_node
    if gpus_here == 0:
        message = (
            f"{spec.gpus_per_node} GPU(s) per node, but this machine has no GPU; "
            "run a CPU job here (gpusPerNode: 0, e.g. examples/cpu-gloo.yaml)"
        )
        raise ProblemsError([Problem(("spec", "gpusPerNode"), message)])
    if needed > gpus_here:
        message = f"{spec.nodes} nodes × {spec.gpus_per_node} GPUs need {needed} GPUs; this machine has {gpus_here}"
        raise ProblemsError([Problem(("spec", "nodes"), message + ": lower nodes or gpusPerNode")])


def pod_network() -> PodNetwork:
    preference = os.environ.get(POD_NETWORK_ENV, AUTO)
    try:
        return open_network(preference)
    except NetworkError as error:
        raise NetworkError(f"{POD_NETWORK_ENV}={preference}: {error}") from None


def pod_filesystem(workdir: Path) -> PodFilesystem:
    preference = os.environ.get(POD_FILESYSTEM_ENV, AUTO)
    try:
        return open_filesystem(workdir.absolute(), preference)
    except FilesystemError as error:
        raise FilesystemError(f"{POD_FILESYSTEM_ENV}={preference}: {error}") from None


def with_metrics_port(job: ScaleTrainJob, port: int) -> ScaleTrainJob:
    """The job with its trainer's metrics port moved; a job without a training block keeps the default."""
    if job.spec.training is None:
        return job
    training = job.spec.training.model_copy(update={"metrics_port": port})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"training": training})})


def _config_path(executor: PodExecutor, pod: Pod, path: str, field: tuple[str, ...]) -> Path:
    """Where the trainer's `path` (spec.training's `field`) lies on this machine; a path that leaves its
    volume is refused at that field."""
    try:
        return executor.host_path(pod, naming.TRAINER_CONTAINER, path)
    except ProblemsError as error:
        raise ProblemsError([Problem(("spec", "training", *field), p.message) for p in error.problems]) from None


class Gang:
    """The job's pods, started together and stopped together: one gang generation, or, restarted in place, each of
    the generations they run in turn."""

    def __init__(
        self, job: ScaleTrainJob, generation: int, executor: PodExecutor, gpus: list[str], reports: LocalReports | None
    ):
        self.executor, self.gpus, self.per_node, self.reports = executor, gpus, job.spec.gpus_per_node, reports
        endpoint = reports.endpoint if reports is not None else None
        rendered = render_job(job, generation)
        self.in_place = endpoint is not None and restarts_in_place(job, LOCAL_AGENT_IMAGE)
        restarting = restarting_in_place(reporting_to(rendered, job, endpoint), job, endpoint, LOCAL_AGENT_IMAGE)
        self.specs = indexed_pods(restarting)
        self.metrics_port = job.spec.metrics_port
        # Where the config's paths lie, from rank 0 without the status-report volume (the node's to make).
        training, rank_0 = job.spec.training, indexed_pods(rendered)[0]
        # A script of one's own (no training block) writes neither: its progress is what /progress says.
        self.metrics_path = (
            _config_path(executor, rank_0, f"{training.output_dir}/metrics.jsonl", ("outputDir",))
            if training is not None
            else None
        )
        checkpoints = training.checkpoint.dir if training is not None else None
        self.checkpoint_dir = (
            _config_path(executor, rank_0, checkpoints, ("checkpoint", "dir")) if checkpoints else None
        )
        self.generation = generation
        self.started = time.monotonic()  # restarted by start(): how long it ran decides the restart backoff
        self.pods: list[RunningPod] = []
        self.last_progress: dict[str, Any] | None = None  # rank 0's last /progress answer
        self.judged: list[PodOutcome] = []  # the pods as the last judgement saw them

    def progress(self) -> dict[str, Any] | None:
        """What the gang's script last pushed (status_reports.py), else rank 0's /progress answer; None when
        neither can be had."""
        if self.reports is not None and (pushed := self.reports.progress(self.generation)) is not None:
            return pushed
        host, port = self.pods[0].address(self.metrics_port)
        return read_progress(f"http://{host}:{port}/progress", timeout_seconds=POLL_SECONDS)

    def start(self) -> None:
        self.started = time.monotonic()
        if self.reports is not None:
            self.reports.in_place.want(self.reports.job, self.generation, len(self.specs))
        for index, spec in enumerate(self.specs):
            # A device plugin's part: this node's slice of the GPUs run-local may use.
            slice_ = self.gpus[index * self.per_node : (index + 1) * self.per_node]
            devices = {"CUDA_VISIBLE_DEVICES": ",".join(slice_)} if slice_ else {}
            # The kubelet's part: the status-report volume's token and CA, as it projects them.
            reports = self.reports
            volumes = {VOLUME: reports.pod_volume(spec["metadata"]["name"], self.generation, index)} if reports else {}
            self.pods.append(self.executor.start(spec, PodExtras(device_env=devices, volumes=volumes)))
        for pod in self.pods:  # a command that cannot start never will: no point in restarting the gang
            for container in pod.containers:
                if container.reason == START_ERROR:
                    raise OSError(f"pod {pod.name}, container {container.name}: {container.message}")

    def outcomes(self) -> list[PodOutcome]:
        """The pods as the gang policy judges them, each as its agent said its workload ended, if it did."""
        for pod in self.pods:
            pod.poll()
        said = self.reports.in_place.outcomes(self.reports.job, self.generation) if self.reports is not None else {}
        pods = [{"metadata": pod.pod["metadata"], "status": pod.status()} for pod in self.pods]
        return [pod_outcome(pod) for pod in as_said_by_agents(pods, said)]

    def wait(self, seconds: float) -> None:
        """Sleep `seconds`, or less: until a pod's agent says its workload ended."""
        if self.reports is None:
            time.sleep(seconds)
        elif self.reports.said.wait(seconds):
            self.reports.said.clear()

    def can_restart_in_place(self) -> bool:
        """Whether every pod can restart where it stands: rendered to, and none has ended. A pod whose agent died
        (killed, out of memory) or that was stopped is over for good, and the gang is made anew."""
        return self.in_place and all(pod.phase == PodPhase.RUNNING for pod in self.pods)

    def restart_in_place(self, generation: int, wait: float) -> None:
        """Run `generation` on these pods: each pod's agent is told to restart, the executor restarts the pod's
        containers where they stand, and the barrier releases the generation to every rank after `wait` seconds
        (spec.restartBackoff)."""
        assert self.reports is not None and self.can_restart_in_place()
        self.generation, self.started = generation, time.monotonic() + wait
        self.last_progress, self.judged = None, []
        not_before = datetime.now(timezone.utc) + timedelta(seconds=wait)
        restarted = [_restarts(pod) for pod in self.pods]
        self.reports.in_place.want(self.reports.job, generation, len(self.pods), not_before)
        # The agents exit at once; the executor, as the kubelet, restarts their pods when it looks (each poll).
        deadline = time.monotonic() + RESTART_POLL_SECONDS
        while time.monotonic() < deadline:
            for pod in self.pods:
                pod.poll()
            if all(_restarts(pod) > before for pod, before in zip(self.pods, restarted, strict=True)):
                return
            time.sleep(RESTART_POLL_INTERVAL)

    def record(self, ended: GangEnding) -> GangRecord:
        """This gang's record, were it to end as last judged (the operator's status.gangs)."""
        return ended_gang(self.generation, self.last_progress, self.judged, ended)

    def judge(self, limits: GangLimits, ledger: Ledger, ended: Sequence[GangRecord], deadline_passed: bool) -> Verdict:
        """The gang policy on these pods, after what `ledger` counted and the gangs that `ended` before; run-local's
        deadline timer speaks for the Job controller. One poll of the pods: the verdict and the gang's record see
        them alike."""
        self.judged = self.outcomes()
        return judge(
            self.judged,
            limits,
            ledger.restarts,
            disruptions=ledger.disruptions,
            crash_loop=crash_loop_length([*ended, self.record(GangEnding.FAILED)]),
            job_failure=DEADLINE_EXCEEDED if deadline_passed else None,
        )

    def stop(self) -> None:
        with signals_deferred():  # a second Ctrl-C must not leave half the processes running
            stop_pods(self.pods)


def _restarts(pod: RunningPod) -> int:
    return sum(container.restart_count for container in pod.containers)


def at_available_size(job: ScaleTrainJob, nodes_available: int | None) -> ScaleTrainJob:
    """`job` as a cluster with only `nodes_available` nodes for it runs it: an elastic gang at the largest size
    that fits (policy/elastic.py), as the operator shrinks one the scheduler cannot place; raises ProblemsError
    where a cluster would leave the gang waiting."""
    spec = job.spec
    if nodes_available is None or nodes_available >= spec.nodes:
        return job
    if spec.elastic is None:
        message = (
            f"--nodes-available {nodes_available} is fewer than nodes ({spec.nodes}), and spec.elastic is not set: "
            "on a cluster the gang would wait for room; set elastic.minNodes to let it run smaller"
        )
        raise ProblemsError([Problem(("spec", "elastic"), message)])
    size = elastic.largest_fitting(spec, nodes_available)
    if size is None:
        message = (
            f"{spec.elastic.min_nodes} exceeds --nodes-available ({nodes_available}): on a cluster the gang would wait "
            f"for room (sizes it may run at: {elastic_sizes.named(elastic_sizes.sizes(spec))})"
        )
        raise ProblemsError([Problem(("spec", "elastic", "minNodes"), message)])
    return job.at_size(size)


def run_local(
    job: ScaleTrainJob,
    workdir: Path,
    *,
    fresh: bool = False,
    nodes_available: int | None = None,
    bound_claims: Mapping[str, Path] | None = None,
) -> int:
    """Run `job` here until it succeeds or fails; the exit code is the job's (0 on success). With
    `nodes_available`, as a cluster with only that many nodes for it would (at_available_size); with
    `bound_claims`, those PersistentVolumeClaims are these directories (`--fresh` leaves them alone)."""
    sized = at_available_size(job, nodes_available)
    if sized is not job:
        sizes = elastic_sizes.named(elastic_sizes.sizes(job.spec))
        available = f"{nodes_available} of {job.spec.nodes} nodes available"
        print(f"{job.name}: {available}; the gang runs at {sized.spec.nodes} (its sizes: {sizes})")
    job = sized
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, _interrupt)
    try:
        gpus = visible_gpus() if job.spec.gpus_per_node else []
        check_fits_this_machine(job, len(gpus))
        with workdir_locked(workdir):
            if fresh:
                for part in WORKDIR_PARTS:
                    shutil.rmtree(workdir / part, ignore_errors=True)
            executor = PodExecutor(
                workdir, pod_network(), filesystem=pod_filesystem(workdir), bound_claims=bound_claims
            )
            try:
                return _run(job, executor, gpus)
            finally:
                with signals_deferred():  # the pod network goes too, whatever comes meanwhile
                    executor.close()
    except Interrupted as interruption:
        print(f"{job.name}: interrupted ({interruption}); every process of the job is stopped")
        return interruption.exit_code
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def workdir_locked(workdir: Path) -> Iterator[None]:
    """Hold `workdir` for the block, or raise WorkdirBusy at once if another run holds it. An flock:
    the kernel drops it when its holder dies, however it dies, so a killed run leaves no stale lock.
    The file stays (deleting it would let a waiting run lock a file no longer in the workdir)."""
    workdir.mkdir(parents=True, exist_ok=True)
    lock = os.open(workdir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)  # not truncated: see _take
    try:
        _take(lock, workdir)
        yield
    finally:
        os.close(lock)  # and with it the lock


def _take(lock: int, workdir: Path) -> None:
    """Lock the lock file and write this process's pid in it; only the holder writes, so a refused
    run cannot erase the pid that its message names."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(lock, 32, 0).decode(errors="replace").strip()
        raise WorkdirBusy(busy_message(workdir, holder)) from None
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())


def busy_message(workdir: Path, holder: str) -> str:
    who = f"pid {holder}" if holder.isdigit() else "its pid not written yet"
    return (
        f"{workdir.absolute()} is in use by run-local ({who}); wait for that run to end or stop it, "
        "or give this one another --workdir"
    )


def _run(job: ScaleTrainJob, executor: PodExecutor, gpus: list[str]) -> int:
    spec, limits = job.spec, GangLimits.of(job.spec)
    if executor.network.shares_host_ports:  # another run's rank 0 may hold the job's metrics port
        job = with_metrics_port(job, free_port())
    started, ledger, ended = time.monotonic(), Ledger(), ()
    for service in (render_service(job), render_master_alias(job)):  # their DNS names, in every gang
        executor.network.publish(service)
    # A script of one's own may push its progress (the Kubeflow Trainer status protocol), as to the operator; the
    # built-in trainer's agents ask there how to restart in place.
    directory = executor.root / "status-reports"
    needed = pushes_reports(job) or restarts_in_place(job, LOCAL_AGENT_IMAGE)
    reports = LocalReports(job, executor.network.host_ip, directory) if needed else None
    with ProgressView(job) as view, reports or contextlib.nullcontext():
        view.say(
            f"{job.name}: {spec.nodes} node(s) × {spec.resolved_procs_per_node} process(es), "
            f"backend {spec.resolved_backend}; logs and volumes in {executor.root}"
        )
        view.say(f"pod network: {executor.network_mode} ({executor.network_reason})")
        view.say(f"pod filesystem: {executor.filesystem_mode} ({executor.filesystem_reason})")
        gang, quick = Gang(job, 0, executor, gpus, reports), 0
        first_metrics = gang.metrics_path
        offset = (
            first_metrics.stat().st_size if first_metrics and first_metrics.exists() else 0
        )  # earlier runs' records
        try:
            gang.start()
            while (verdict := _run_gang(gang, view, limits, ledger, ended)).action is Action.RESTART:
                ended = tuple(
                    kept([*ended, gang.record(GangEnding.DISRUPTED if verdict.disruption else GangEnding.FAILED)])
                )
                ledger = ledger.after(verdict, job)
                wait, quick = restart_backoff(spec.restart_backoff, quick, time.monotonic() - gang.started)
                in_place = gang.can_restart_in_place()
                how = " in place" if in_place else ""
                backoff = f" in {wait} s (spec.restartBackoff)" if wait else ""
                view.say(
                    f"{verdict.message}; the next gang starts{how}{backoff}" if how or backoff else verdict.message
                )
                if in_place:
                    gang.restart_in_place(ledger.gangs_ended, wait)
                    continue
                gang.stop()
                time.sleep(wait)
                gang = Gang(job, ledger.gangs_ended, executor, gpus, reports)
                gang.start()
        finally:
            gang.stop()
    result = RunResult(
        job,
        verdict,
        gang.pods,
        ledger.restarts,
        ledger.disruptions,
        time.monotonic() - started,
        # On an emptyDir each gang writes a file of its own.
        metrics_records(gang.metrics_path, offset if gang.metrics_path == first_metrics else 0),
        gang.metrics_path,
        gang.checkpoint_dir,
        executor.root,
    )
    print(summary(result))
    return verdict.exit_code


def _run_gang(
    gang: Gang, view: ProgressView, limits: GangLimits, ledger: Ledger, ended: Sequence[GangRecord]
) -> Verdict:
    """Judge `gang` until its generation ends (the caller stops its pods, or restarts them in place)."""
    deadline = gang.started + limits.active_deadline_seconds if limits.active_deadline_seconds else None
    while True:
        passed = deadline is not None and time.monotonic() > deadline
        if (verdict := gang.judge(limits, ledger, ended, passed)).action is not Action.KEEP_RUNNING:
            return verdict
        if (progress := gang.progress()) is not None:
            gang.last_progress = progress
            view.update(progress)
        gang.wait(POLL_SECONDS)


@dataclass
class _SignalState:
    deferring: bool = False
    deferred: int | None = None  # a stop signal that came while deferring


_signals = _SignalState()


def _interrupt(signum: int, frame: Any) -> None:
    if _signals.deferring:
        _signals.deferred = signum
        return
    raise Interrupted(signum)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP that come during the block take effect when it is done. (A flag, not
    a blocked signal mask: the kernel may hand the signal to another thread, e.g. the progress bar's.)"""
    _signals.deferring, _signals.deferred = True, None
    try:
        yield
    finally:
        _signals.deferring = False
        if _signals.deferred is not None:
            raise Interrupted(_signals.deferred)
