"""The pod executor's kubelet rules, pure: `$(VAR)` expansion, env and the downward API, the command
line, volumes, the working directory, the clean environment, the Job controller's indexed pods,
and the pod network's hosts files and loopback rewrites. No processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from scaletrain_operator.api.job import parse_job
from scaletrain_operator.local.executor import PodExecutor, PodExtras, find_executable
from scaletrain_operator.local.expansion import expand
from scaletrain_operator.local.job_controller import indexed_pods
from scaletrain_operator.local.pod_filesystem import (
    AUTO,
    CONTAINED,
    ContainedFilesystem,
    FilesystemError,
    SharedFilesystem,
    open_filesystem,
)
from scaletrain_operator.local.pod_network import (
    LoopbackNetwork,
    PodIdentity,
    PodSandbox,
    hosts_file,
    resolv_conf,
)
from scaletrain_operator.local.pod_spec import (
    PodFields,
    VolumeDirs,
    command_line,
    image_env,
    mount_dirs,
    pod_field,
    relocate_config_env,
    resolve_env,
    restart_rules,
    restarts_all_containers,
    working_dir,
)
from scaletrain_operator.local.processes import exit_code
from scaletrain_operator.render.children import render_job
from scaletrain_testing.jobs import base_job
from scaletrain_trainer.contract.validation import ProblemsError

FIELDS = PodFields(pod_ip="10.244.0.7", host_ip="10.244.0.1", node_name="node-a")
CONTAINER = ("spec", "containers", 0)

# Kubernetes' own table (third_party/forked/golang/expansion/expand_test.go), input → expected.
VARIABLES = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
EXPANSIONS = [
    ("$(VAR_A)", "A"),
    ("$(VAR_A)-$(VAR_A)", "A-A"),
    ("$(VAR_A)-1", "A-1"),
    ("___$(VAR_B)___", "___B___"),
    ("___$(VAR_C)", "___C"),
    ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
    ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
    ("$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"),
    ("f000-$$VAR_A", "f000-$VAR_A"),
    ("foo\\$(VAR_C)bar", "foo\\Cbar"),
    ("foo\\\\$(VAR_C)bar", "foo\\\\Cbar"),
    ("foo\\\\\\\\$(VAR_A)bar", "foo\\\\\\\\Abar"),
    ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),
    ("$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
    ("$(VAR_REF)", "$(VAR_A)"),
    ("%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"),
    ("foo$(VAR_EMPTY)bar", "foobar"),
    ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),
    ("f00__(VAR_A)__", "f00__(VAR_A)__"),
    ("$?_boo_$!", "$?_boo_$!"),
    ("$VAR_A", "$VAR_A"),
    ("$(VAR_DNE)", "$(VAR_DNE)"),
    ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
    ("$$$$$$(VAR_A)", "$$$(VAR_A)"),
    ("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
    ("$$$$$$$(VAR_A)", "$$$A"),
    ("$VAR_A)", "$VAR_A)"),
    ("${VAR_A}", "${VAR_A}"),
    ("$(VAR_B)_______$(A", "B_______$(A"),
    ("$(VAR_C)_______$(", "C_______$("),
    ("$(VAR_A)foobarzab$", "Afoobarzab$"),
    ("foo-\\$(VAR_A", "foo-\\$(VAR_A"),
    ("--$($($($($--", "--$($($($($--"),
    ("$($($($($--foo$(", "$($($($($--foo$("),
    ("foo0--$($($($(", "foo0--$($($($("),
    ("$(foo$$var)", "$(foo$$var)"),
    ("\n", "\n"),
    ("€$(VAR_A)€$", "€A€$"),  # not bytes: one character each
]


@pytest.mark.parametrize(("text", "expected"), EXPANSIONS)
def test_expansion_follows_kubernetes_rules(text, expected):
    assert expand(text, VARIABLES) == expected


def a_pod(env=(), **spec):
    """A pod with one container `main` and the given env; keyword arguments patch its spec."""
    return {
        "metadata": {
            "name": "trainer-0-abcde",
            "namespace": "team-a",
            "uid": "uid-1",
            "labels": {"app": "demo"},
            "annotations": {"batch.kubernetes.io/job-completion-index": "3"},
        },
        "spec": {
            "hostname": "trainer-0",
            "subdomain": "trainer",
            "restartPolicy": "Never",
            "serviceAccountName": "runner",
            "containers": [{"name": "main", "command": ["python"], "env": list(env)}],
            **spec,
        },
    }


def test_env_is_resolved_in_order_each_value_expanding_the_ones_before_it():
    env = [
        {"name": "FOO", "value": "bar"},
        {"name": "ZOO", "value": "$(FOO)-1"},
        {"name": "BLU", "value": "$(ZOO)-2"},
        {"name": "EARLY", "value": "$(LATE)"},  # not defined yet: stays as written
        {"name": "LATE", "value": "late"},
        {"name": "EMPTY"},
        {
            "name": "RANK",
            "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
            },
        },
        {"name": "LITERAL_REF", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "FROM_RANK", "value": "rank-$(RANK)"},
        {"name": "NUMBER", "value": 7},
    ]
    pod = a_pod(env)
    assert resolve_env(pod, env, FIELDS, CONTAINER) == {
        "FOO": "bar",
        "ZOO": "bar-1",
        "BLU": "bar-1-2",
        "EARLY": "$(LATE)",
        "LATE": "late",
        "EMPTY": "",
        "RANK": "3",
        "LITERAL_REF": "demo",
        "FROM_RANK": "rank-3",
        "NUMBER": "7",
    }


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata.name", "trainer-0-abcde"),
        ("metadata.namespace", "team-a"),
        ("metadata.uid", "uid-1"),
        ("metadata.labels['app']", "demo"),
        ("metadata.labels['missing']", ""),
        ("metadata.annotations['batch.kubernetes.io/job-completion-index']", "3"),
        ("spec.nodeName", "node-a"),
        ("spec.serviceAccountName", "runner"),
        ("status.podIP", "10.244.0.7"),
        ("status.hostIP", "10.244.0.1"),
    ],
)
def test_field_refs_read_the_pod_and_what_the_node_assigned(path, value):
    assert pod_field(a_pod(), path, FIELDS) == value


def test_the_bound_node_name_wins_over_the_executors_own():
    assert pod_field(a_pod(nodeName="gpu-node-3"), "spec.nodeName", FIELDS) == "gpu-node-3"


@pytest.mark.parametrize(
    ("var", "named"),
    [
        ({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}, "secretKeyRef"),
        ({"name": "TOKEN", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}, "configMapKeyRef"),
        ({"name": "TOKEN", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}, "'status.phase'"),
    ],
)
def test_env_this_machine_cannot_resolve_is_an_error_naming_the_variable_and_field(var, named):
    with pytest.raises(ProblemsError) as error:
        resolve_env(a_pod([var]), [var], FIELDS, CONTAINER)
    (problem,) = error.value.problems
    assert str(problem).startswith("spec.containers[0].env[0].valueFrom.") and named in str(problem)


def test_a_rendered_jobs_env_refused_for_a_secret_names_it():
    secret = {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "token"}}}
    pod = indexed_pods(render_job(parse_job(base_job(env=[secret]))))[0]
    container = pod["spec"]["containers"][0]
    with pytest.raises(ProblemsError) as error:
        resolve_env(pod, container["env"], FIELDS, CONTAINER)
    assert "WANDB_API_KEY" in str(error.value) and "secretKeyRef" in str(error.value)


def test_command_and_args_expand_from_the_containers_env_only():
    container = {"command": ["python", "$(SCRIPT)"], "args": ["--master", "$(MASTER_ADDR)", "$(PATH)", "$$(X)"]}
    env = {"SCRIPT": "train.py", "MASTER_ADDR": "job-0.job"}
    assert command_line(container, env, CONTAINER) == ["python", "train.py", "--master", "job-0.job", "$(PATH)", "$(X)"]


def test_a_container_without_a_command_is_refused():
    with pytest.raises(ProblemsError, match=r"spec\.containers\[0\]\.command: give the container a command"):
        command_line({"args": ["x"]}, {}, CONTAINER)


def test_volumes_are_directories_a_claim_shared_by_namespace_and_claim_name(tmp_path):
    volumes = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        {"name": "cache", "emptyDir": {"medium": "Memory"}},
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}},
        {"name": "code", "hostPath": {"path": "/opt/code"}},
    ]
    mounts = [
        {"name": "scratch", "mountPath": "/scratch/"},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "cache", "mountPath": "/cache"},
        {"name": "ckpt", "mountPath": "/ckpt", "subPath": "run-1"},
        {"name": "code", "mountPath": "/code"},
    ]
    pod = a_pod(volumes=volumes)
    pod_dir, claims = tmp_path / "pod", tmp_path / "claims"
    prepared = {"token": tmp_path / "kubelet" / "token"}
    mounts.append({"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    volumes.append({"name": "token", "projected": {"sources": []}})
    assert mount_dirs(pod, {"volumeMounts": mounts}, VolumeDirs(pod_dir, claims), CONTAINER, prepared) == {
        "/scratch": pod_dir / "volumes" / "scratch",
        "/dev/shm": Path("/dev/shm"),  # a memory-backed emptyDir at /dev/shm: this machine's own
        "/cache": pod_dir / "volumes" / "cache",  # elsewhere an ordinary directory
        "/ckpt": claims / "team-a" / "checkpoints" / "run-1",
        "/code": Path("/opt/code"),
        "/var/run/secrets/kubernetes.io/serviceaccount": tmp_path / "kubelet" / "token",  # one the caller made
    }


def test_a_claim_bound_to_a_directory_is_that_directory_and_the_others_stay_in_the_claims_dir(tmp_path):
    """run-local's --claim: data already on a volume, not a new empty directory."""
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}},
    ]
    mounts = [{"name": "data", "mountPath": "/data", "readOnly": True}, {"name": "ckpt", "mountPath": "/ckpt"}]
    claims, bound = tmp_path / "claims", {"datasets": tmp_path / "my-data"}
    dirs = VolumeDirs(tmp_path / "pod", claims, bound)
    assert mount_dirs(a_pod(volumes=volumes), {"volumeMounts": mounts}, dirs, CONTAINER) == {
        "/data": tmp_path / "my-data",
        "/ckpt": claims / "team-a" / "checkpoints",
    }


@pytest.mark.parametrize(
    ("volume", "mount", "message"),
    [
        ({"name": "v", "secret": {"secretName": "s"}}, {"name": "v", "mountPath": "/s"}, "volume 'v' is a secret"),
        ({"name": "v", "emptyDir": {}}, {"name": "w", "mountPath": "/s"}, "no volume named 'w'"),
        ({"name": "v", "emptyDir": {}}, {"name": "v", "mountPath": "/s", "subPathExpr": "$(X)"}, "use subPath"),
    ],
)
def test_volumes_this_machine_cannot_provide_are_errors_naming_the_mount(tmp_path, volume, mount, message):
    with pytest.raises(ProblemsError, match=r"spec\.containers\[0\]\.volumeMounts\[0\]") as error:
        mount_dirs(a_pod(volumes=[volume]), {"volumeMounts": [mount]}, VolumeDirs(tmp_path, tmp_path), CONTAINER)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("volume", "mount", "problem"),
    [
        ({"name": "v", "emptyDir": {}}, {"name": "v", "mountPath": "/s", "subPath": "../../x"},
         r"volumeMounts\[0\]\.subPath: '\.\./\.\./x' must be a relative path that stays inside its volume"),
        ({"name": "v", "emptyDir": {}}, {"name": "v", "mountPath": "/s", "subPath": "/etc"},
         r"volumeMounts\[0\]\.subPath: '/etc' must be a relative path"),
        ({"name": "../../x", "emptyDir": {}}, {"name": "../../x", "mountPath": "/s"},
         r"spec\.volumes\[0\]\.name: '\.\./\.\./x' is not a valid name"),
        ({"name": "v", "persistentVolumeClaim": {"claimName": "../../x"}}, {"name": "v", "mountPath": "/s"},
         r"spec\.volumes\[0\]\.persistentVolumeClaim\.claimName: '\.\./\.\./x' is not a valid name"),
    ],
)  # fmt: skip
def test_nothing_a_pod_names_lands_outside_its_volumes(tmp_path, volume, mount, problem):
    with pytest.raises(ProblemsError, match=problem):
        mount_dirs(a_pod(volumes=[volume]), {"volumeMounts": [mount]}, VolumeDirs(tmp_path, tmp_path), CONTAINER)


def test_a_training_config_path_that_climbs_out_of_its_volume_is_refused_naming_the_field():
    config = {"checkpoint": {"dir": "/ckpt/../../../x"}}
    env = [{"name": "SCALETRAIN_CONFIG", "value": json.dumps(config)}]
    with pytest.raises(ProblemsError, match=r"spec\.training\.checkpoint\.dir: '/ckpt/\.\./\.\./\.\./x' leaves"):
        relocate_config_env(env, {"/ckpt": Path("/w/ckpt")})
    inside = [{"name": "SCALETRAIN_CONFIG", "value": json.dumps({"outputDir": "/ckpt/./a/../b"})}]
    assert json.loads(relocate_config_env(inside, {"/ckpt": Path("/w/ckpt")})[0]["value"]) == {"outputDir": "/w/ckpt/b"}


@pytest.mark.parametrize(
    ("working", "expected"),
    [
        (None, "rootfs"),  # the image's `/`, the container's own
        ("/workspace", "rootfs/workspace"),  # not this machine's /workspace: every pod would share it
        ("relative/dir", "rootfs/relative/dir"),  # relative to the container's root
        ("/data/run", "volumes/data/run"),  # under a mount: in the volume
        ("/data", "volumes/data"),
        ("/database", "rootfs/database"),  # a prefix of a name is not a parent directory
        ("/../../etc", "rootfs/etc"),  # cannot climb out of the container's root
    ],
)
def test_the_working_directory_is_the_containers_own_or_in_a_volume(tmp_path, working, expected):
    container = {"workingDir": working} if working else {}
    mounts = {"/data": tmp_path / "volumes" / "data"}
    assert working_dir(container, mounts, tmp_path / "rootfs") == tmp_path / expected


def test_training_config_paths_under_a_mount_move_to_the_volume():
    config = {"checkpoint": {"dir": "/ckpt/run"}, "outputDir": "/ckptx", "data": {"path": "/ckpt"}}
    env = [{"name": "SCALETRAIN_CONFIG", "value": json.dumps(config)}, {"name": "OTHER", "value": "/ckpt/x"}]
    relocated = relocate_config_env(env, {"/ckpt": Path("/w/ckpt")})
    assert json.loads(relocated[0]["value"]) == {
        "checkpoint": {"dir": "/w/ckpt/run"},
        "outputDir": "/ckptx",
        "data": {"path": "/w/ckpt"},
    }
    assert relocated[1] == env[1]


def test_the_image_env_is_all_a_container_gets_besides_its_own():
    assert image_env(Path("/venv/bin"), "trainer-0") == {
        "PATH": "/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOSTNAME": "trainer-0",
    }


def test_a_container_is_resolved_with_a_clean_env_and_its_own_directories(tmp_path, monkeypatch):
    monkeypatch.setenv("CALLERS_SECRET", "must not leak")
    env = [
        {"name": "MASTER_ADDR", "value": "trainer-0.trainer"},
        {"name": "HOME", "value": "/home/me"},
        {"name": "TORCHELASTIC_ERROR_FILE", "value": "/dev/termination-log"},
    ]
    pod = a_pod(env, containers=[{"name": "main", "command": ["python", "$(MASTER_ADDR)"], "env": env}])
    executor = PodExecutor(
        tmp_path, LoopbackNetwork("a test"), node_name="node-a", filesystem=SharedFilesystem("a test")
    )
    sandbox = executor.network.attach(PodIdentity.of(pod))
    extras = PodExtras(device_env={"CUDA_VISIBLE_DEVICES": "1"})
    run = executor.resolve_container(pod, sandbox, "m", extras, CONTAINER, pod["spec"]["containers"][0])
    own = tmp_path / "pods" / "team-a_trainer-0-abcde_uid-1" / "containers" / "main"
    assert run.argv == ["python", "127.0.0.1"]  # the loopback network points the master at this machine
    assert run.files.start_dir == own / "rootfs"
    assert run.files.command("/usr/bin/python", run.argv) == ["/usr/bin/python", "127.0.0.1"]
    assert run.log_path == tmp_path / "logs" / "trainer-0-abcde_main.log"
    assert run.env == {
        "PATH": run.env["PATH"],
        "HOSTNAME": "trainer-0",
        "HOME": "/home/me",  # the pod's env overrides the image's
        "TMPDIR": str(own / "rootfs" / "tmp"),
        "MASTER_ADDR": "127.0.0.1",
        "TORCHELASTIC_ERROR_FILE": str(own / "termination-log"),  # no file at the container's path here
        "CUDA_VISIBLE_DEVICES": "1",
        "SCALETRAIN_LOCAL_CONTAINER": "m/main",
        "SCALETRAIN_TERMINATION_LOG": str(own / "termination-log"),
    }
    assert run.env["PATH"].split(":")[0] == str(Path(sys.executable).parent)


def test_an_env_value_naming_a_file_the_node_wrote_moves_to_it_where_no_mount_puts_it_in_place(tmp_path):
    """A projected token (the status-report endpoint's) on this machine's filesystem: the container's path to
    it is moved to where the node wrote it; a path into a claim is the script's to resolve, and stays."""
    env = [
        {"name": "KUBEFLOW_TRAINER_SERVER_TOKEN", "value": "/var/run/reports/token"},
        {"name": "DATA", "value": "/data/train.bin"},
    ]
    mounts = [{"name": "reports", "mountPath": "/var/run/reports", "readOnly": True},
              {"name": "data", "mountPath": "/data"}]  # fmt: skip
    volumes = [{"name": "reports", "projected": {"sources": []}}, {"name": "data", "emptyDir": {}}]
    container = {"name": "main", "command": ["python"], "env": env, "volumeMounts": mounts}
    pod = a_pod(env, containers=[container], volumes=volumes)
    written = tmp_path / "node" / "reports"
    written.mkdir(parents=True)
    (written / "token").write_text("a token")
    executor = PodExecutor(
        tmp_path, LoopbackNetwork("a test"), node_name="node-a", filesystem=SharedFilesystem("a test")
    )
    sandbox = executor.network.attach(PodIdentity.of(pod))
    run = executor.resolve_container(pod, sandbox, "m", PodExtras(volumes={"reports": written}), CONTAINER, container)
    assert run.env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == str(written / "token")
    assert run.env["DATA"] == "/data/train.bin"


def contained_container(tmp_path, pod, container):
    executor = PodExecutor(
        tmp_path, LoopbackNetwork("a test"), node_name="node-a", filesystem=ContainedFilesystem(tmp_path)
    )
    sandbox = executor.network.attach(PodIdentity.of(pod))
    return executor, executor.resolve_container(pod, sandbox, "m", PodExtras(), CONTAINER, container)


def test_a_contained_container_gets_its_volumes_at_their_mount_paths_and_container_paths_unchanged(tmp_path):
    config = {"outputDir": "/output/model", "checkpoint": {"dir": "/ckpt"}}
    env = [
        {"name": "SCALETRAIN_CONFIG", "value": json.dumps(config)},
        {"name": "TORCHELASTIC_ERROR_FILE", "value": "/dev/termination-log"},
    ]
    volumes = [
        {"name": "output", "emptyDir": {}},
        {"name": "data", "hostPath": {"path": "/srv/data"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
    ]
    mounts = [
        {"name": "output", "mountPath": "/output"},
        {"name": "data", "mountPath": "/data/", "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    container = {
        "name": "main",
        "command": ["python", "train.py"],
        "env": env,
        "volumeMounts": mounts,
        "workingDir": "/work",
    }
    pod = a_pod(env, volumes=volumes, containers=[container])
    executor, run = contained_container(tmp_path, pod, container)
    own = tmp_path / "pods" / "team-a_trainer-0-abcde_uid-1" / "containers" / "main"
    assert json.loads(run.env["SCALETRAIN_CONFIG"]) == config  # the paths are the container's own
    assert run.env["TORCHELASTIC_ERROR_FILE"] == "/dev/termination-log"
    assert run.env["HOME"] == "/root" and "TMPDIR" not in run.env and "SCALETRAIN_TERMINATION_LOG" not in run.env
    layout = run.files.layout
    assert layout["volumes"] == [
        {"path": "/output", "source": str(tmp_path / "pods" / "team-a_trainer-0-abcde_uid-1" / "volumes" / "output"),
         "readOnly": False},
        {"path": "/data", "source": "/srv/data", "readOnly": True},
        {"path": "/dev/termination-log", "source": str(own / "termination-log"), "readOnly": False},
    ]  # fmt: skip
    assert layout["shmSize"] == str(2 * 1024**3)  # a tmpfs of the emptyDir's sizeLimit, not this machine's /dev/shm
    assert layout["hidden"] == [str(tmp_path)]  # every pod's files
    assert layout["workingDir"] == "/work"
    assert layout["layer"] == str(own / "rootfs")
    command = run.files.command("/usr/bin/python", run.argv)
    assert command[:3] == [sys.executable, "-I", "-S"] and command[-2:] == ["python", "train.py"]
    assert json.loads(command[4]) == layout
    assert (
        executor.host_path(pod, "main", "/output/model/metrics.jsonl")
        == Path(layout["volumes"][0]["source"]) / "model" / "metrics.jsonl"
    )
    assert executor.host_path(pod, "main", "/ckpt/step-1") == own / "rootfs" / "ckpt" / "step-1"  # its own layer


@pytest.mark.parametrize(
    ("volume", "size"),
    [
        (None, str(64 * 1024**2)),  # containerd's default
        ({"name": "dshm", "emptyDir": {"medium": "Memory"}}, "50%"),  # no sizeLimit: tmpfs's default
        ({"name": "dshm", "emptyDir": {}}, str(64 * 1024**2)),  # on disk: no shared memory
    ],
)
def test_a_contained_containers_dev_shm_is_sized_as_a_container_runtime_sizes_it(tmp_path, volume, size):
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}] if volume else []
    container = {"name": "main", "command": ["python"], "volumeMounts": mounts}
    _, run = contained_container(tmp_path, a_pod(volumes=[volume] if volume else [], containers=[container]), container)
    assert run.files.layout["shmSize"] == size


def test_a_custom_termination_message_path_is_where_the_file_is_mounted(tmp_path):
    container = {"name": "main", "command": ["python"], "terminationMessagePath": "/var/log/why"}
    _, run = contained_container(tmp_path, a_pod(containers=[container]), container)
    assert run.files.layout["volumes"][-1]["path"] == "/var/log/why"


def test_without_root_pods_share_this_machines_filesystem_and_the_run_says_what_is_not_contained(tmp_path, monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    shared = open_filesystem(tmp_path, AUTO)
    assert shared.mode == "shared"
    assert shared.reason.startswith("not running as root, which contained pods need: ")
    assert "land in this machine's files" in shared.reason
    with pytest.raises(FilesystemError, match="contained pods are not available: not running as root"):
        open_filesystem(tmp_path, CONTAINED)
    with pytest.raises(FilesystemError, match="pod filesystem 'sealed': expected one of auto, contained, shared"):
        open_filesystem(tmp_path, "sealed")


def test_a_pods_hosts_file_names_it_and_the_other_pods_of_its_namespace():
    rank_0 = PodSandbox(PodIdentity("team-a", "job-0", "job"), "10.244.3.2")
    rank_1 = PodSandbox(PodIdentity("team-a", "job-1", "job"), "10.244.3.3")
    loner = PodSandbox(PodIdentity("team-a", "loner", None), "10.244.3.4")
    hosts = hosts_file(rank_1, [rank_0, rank_1, loner])
    assert hosts.startswith("# Kubernetes-managed hosts file") and "127.0.0.1\tlocalhost\n" in hosts
    assert hosts.endswith(
        "10.244.3.3\tjob-1.job.team-a.svc.cluster.local job-1.job.team-a.svc job-1.job job-1\n"
        "10.244.3.2\tjob-0.job.team-a.svc.cluster.local job-0.job.team-a.svc job-0.job\n"
    )  # a pod without a subdomain has no DNS name; a bare hostname is a pod's own only
    assert "loner" not in hosts and "loner" in hosts_file(loner, [rank_0, loner])
    assert resolv_conf("team-a").startswith("search team-a.svc.cluster.local svc.cluster.local cluster.local\n")


def test_a_headless_service_names_the_pods_it_selects_in_every_hosts_file():
    """The master alias: a name for rank 0 of whichever generation is running (render/children.py)."""
    index_0 = (("batch.kubernetes.io/job-completion-index", "0"), ("scaletrain.io/job-name", "job"))
    rank_0 = PodSandbox(PodIdentity("team-a", "job-g1-0", "job", index_0), "10.244.3.2")
    rank_1 = PodSandbox(PodIdentity("team-a", "job-g1-1", "job", (("scaletrain.io/job-name", "job"),)), "10.244.3.3")
    alias = {"job-master": {"scaletrain.io/job-name": "job", "batch.kubernetes.io/job-completion-index": "0"}}
    hosts = hosts_file(rank_1, [rank_0, rank_1], alias)
    assert hosts.endswith(
        "10.244.3.2\tjob-g1-0.job.team-a.svc.cluster.local job-g1-0.job.team-a.svc job-g1-0.job "
        "job-master.team-a.svc.cluster.local job-master.team-a.svc job-master\n"
    )
    assert hosts_file(rank_1, [rank_1], alias).count("job-master") == 0  # no rank 0 running: no address
    assert hosts_file(rank_1, [rank_0, rank_1], {"everything": {}}).count("everything") == 0  # selects nothing


def test_indexed_pods_are_what_the_job_controller_makes():
    job = render_job(parse_job(base_job(nodes=3, training={"globalBatchSize": 12, "microBatchSize": 4})), 2)
    pods = indexed_pods(job)
    assert [p["spec"]["hostname"] for p in pods] == ["demo-g2-0", "demo-g2-1", "demo-g2-2"]
    assert all(p["metadata"]["name"].startswith(f"demo-g2-{i}-") for i, p in enumerate(pods))
    assert len({p["metadata"]["uid"] for p in pods}) == 3
    assert {p["spec"]["subdomain"] for p in pods} == {"demo"}
    assert pods[2]["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "2"
    assert pods[2]["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "2"
    container = pods[2]["spec"]["containers"][0]
    env = resolve_env(pods[2], container["env"], FIELDS, CONTAINER)
    assert env["PET_NODE_RANK"] == env["NODE_RANK"] == env["JOB_COMPLETION_INDEX"] == "2"
    assert env["PET_MASTER_ADDR"] == env["MASTER_ADDR"] == "demo-g2-0.demo"


def test_the_executable_is_found_as_the_runtime_finds_it(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert find_executable("sh", "/usr/bin:/bin", tmp_path) in ("/usr/bin/sh", "/bin/sh")
    assert find_executable("./run.sh", "/nowhere", tmp_path) == str(tmp_path / "run.sh")
    assert find_executable("run.sh", "/nowhere", tmp_path) is None  # no slash: PATH only
    assert find_executable("no-such-command", "/usr/bin:/bin", tmp_path) is None


def test_a_signal_is_an_exit_code_of_128_plus_its_number():
    assert exit_code(-9) == 137 and exit_code(-15) == 143 and exit_code(3) == 3


def rule(operator, values, action="RestartAllContainers"):
    return {"action": action, "exitCodes": {"operator": operator, "values": values}}


@pytest.mark.parametrize(
    "rules, code, restarts",
    [
        ([rule("In", [42])], 42, True),
        ([rule("In", [42])], 1, False),
        ([rule("NotIn", [0])], 1, True),
        ([rule("NotIn", [0])], 0, False),
        ([rule("In", [1]), rule("NotIn", [0])], 2, True),  # the first rule that matches decides
        ([], 42, False),
    ],
)
def test_the_first_restart_rule_whose_exit_codes_match_decides(rules, code, restarts):
    assert restarts_all_containers(rules, code) is restarts


def test_restart_rules_are_read_beside_a_container_restart_policy_and_a_rule_restarting_one_container_is_refused():
    where = ("spec", "containers", 0)
    assert restart_rules({"restartPolicyRules": [rule("In", [42])]}, where) == []  # the kubelet ignores them so
    assert restart_rules({"restartPolicy": "Never", "restartPolicyRules": [rule("In", [42])]}, where) == [
        rule("In", [42])
    ]
    with pytest.raises(ProblemsError) as refused:
        restart_rules({"restartPolicy": "Never", "restartPolicyRules": [rule("In", [1], action="Restart")]}, where)
    (problem,) = refused.value.problems
    assert problem.path == (*where, "restartPolicyRules", 0, "action") and "RestartAllContainers" in problem.message
