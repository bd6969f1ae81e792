"""A local pod's filesystem is its own, as a container's: run as root, a script that writes absolute
paths writes its volumes (at their mountPaths) or its own layer, never this machine's files;
/dev/termination-log becomes its termination message, /dev/shm is its own, and what it writes to /tmp
stays its own."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from scaletrain_operator.local.executor import PodExecutor
from scaletrain_operator.local.pod_network import LoopbackNetwork
from scaletrain_testing.local_pods import a_pod, run_to_end
from scaletrain_testing.timeouts import POD_RUN_S

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a container's filesystem needs root")

OUTPUT = {"name": "output", "emptyDir": {}}
AT_OUTPUT = {"name": "output", "mountPath": "/output"}


@pytest.fixture
def executor(tmp_path):
    with PodExecutor(tmp_path / "executor", LoopbackNetwork("a test")) as executor:
        assert executor.filesystem_mode == "contained", executor.filesystem_reason  # as root, where it can be
        yield executor


def python(script: str) -> list[str]:
    return [sys.executable, "-c", script]


def test_a_write_under_a_mount_path_lands_in_the_volume_and_not_in_this_machines_path(executor):
    name = f"x-{uuid.uuid4().hex}"
    had_output = Path("/output").exists()
    script = f"open('/output/{name}', 'w').write('in the volume')"
    pod = a_pod("writer", python(script), [OUTPUT], [AT_OUTPUT])
    running = run_to_end(executor, pod, POD_RUN_S)
    assert running.phase == "Succeeded", running.tail()
    volume = executor.pod_dir(pod) / "volumes" / "output"
    assert (volume / name).read_text() == "in the volume"
    assert not Path("/output", name).exists()
    assert Path("/output").exists() == had_output  # not even the mount point was made here


def test_the_termination_log_the_script_writes_is_the_pods_termination_message(executor):
    had_termination_log = Path("/dev/termination-log").exists()
    script = "import sys; open('/dev/termination-log', 'w').write('the cause, as written'); sys.exit(3)"
    running = run_to_end(executor, a_pod("failing", python(script)), POD_RUN_S)
    (status,) = running.status()["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 3
    assert status["state"]["terminated"]["message"] == "the cause, as written"
    assert Path("/dev/termination-log").exists() == had_termination_log


def test_of_a_long_termination_log_the_last_4096_bytes_are_kept_as_the_kubelet_keeps_them(executor):
    """Where a traceback ends with its exception."""
    script = "import sys; open('/dev/termination-log', 'w').write('x' * 5000 + 'ValueError: the cause'); sys.exit(1)"
    running = run_to_end(executor, a_pod("long", python(script)), POD_RUN_S)
    (status,) = running.status()["containerStatuses"]
    message = status["state"]["terminated"]["message"]
    assert len(message) == 4096 and message.endswith("ValueError: the cause")


@pytest.fixture
def host_dir():
    """A directory of this machine's that a pod sees (not under /tmp, which is the container's own)."""
    directory = Path(tempfile.mkdtemp(prefix="scaletrain-test-", dir="/var/tmp"))
    yield directory
    shutil.rmtree(directory)


def test_a_pod_cannot_write_this_machines_files_outside_its_volumes(executor, host_dir):
    """It writes its own copy (the container's writable layer), as a container writes over its image."""
    existing = host_dir / "existing"
    existing.write_text("this machine's")
    created = host_dir / "created"
    script = f"open({str(existing)!r}, 'w').write('the pod\\'s'); open({str(created)!r}, 'w').write('new')"
    running = run_to_end(executor, a_pod("overwriter", python(script)), POD_RUN_S)
    assert running.phase == "Succeeded", running.tail()
    assert existing.read_text() == "this machine's"
    assert not created.exists()


def test_a_mount_path_through_a_symbolic_link_is_mounted_where_the_container_sees_it(executor, host_dir):
    """As /var/run -> /run: the link's target is the container's path, not this machine's."""
    elsewhere = f"/scaletrain-test-{uuid.uuid4().hex}"  # nowhere on this machine
    (host_dir / "run").symlink_to(elsewhere)
    script = f"open({str(host_dir / 'run' / 'data' / 'f')!r}, 'w').write('through the link')"
    pod = a_pod("linked", python(script), [OUTPUT], [{"name": "output", "mountPath": str(host_dir / "run" / "data")}])
    running = run_to_end(executor, pod, POD_RUN_S)
    assert running.phase == "Succeeded", running.tail()
    assert (executor.pod_dir(pod) / "volumes" / "output" / "f").read_text() == "through the link"
    assert not Path(elsewhere).exists()


def test_a_new_pod_does_not_see_what_an_earlier_one_wrote_outside_its_volumes(executor):
    """A checkpoint written to a path no volume holds is gone with its container, as on a cluster:
    the next run starts fresh instead of resuming from it."""
    write = "import os; os.makedirs('/ckpt', exist_ok=True); open('/ckpt/step-10', 'w').write('10')"
    assert run_to_end(executor, a_pod("first", python(write)), POD_RUN_S).phase == "Succeeded"
    look = "import os, sys; sys.exit(1 if os.path.exists('/ckpt/step-10') else 0)"
    later = run_to_end(executor, a_pod("later", python(look)), POD_RUN_S)
    assert later.phase == "Succeeded", "the later pod found the earlier pod's /ckpt/step-10"


def test_dev_shm_is_the_containers_own_with_the_volumes_size_limit(executor):
    name = f"segment-{uuid.uuid4().hex}"
    script = (
        "import os; "
        f"open('/dev/shm/{name}', 'w').write('shared'); "
        "stat = os.statvfs('/dev/shm'); print('shm bytes', stat.f_blocks * stat.f_frsize)"
    )
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "96Mi"}}
    pod = a_pod("shm", python(script), [shm], [{"name": "dshm", "mountPath": "/dev/shm"}])
    running = run_to_end(executor, pod, POD_RUN_S)
    assert running.phase == "Succeeded", running.tail()
    assert f"shm bytes {96 * 1024 * 1024}" in running.tail()
    assert not Path("/dev/shm", name).exists()


def test_tmp_is_this_machines_as_the_image_with_the_containers_writes_its_own(executor, tmp_path):
    """/tmp as in the image: what this machine has there is readable; what the pod writes is the pod's."""
    data = tmp_path / "tokens.txt"
    data.write_text("this machine's")
    created = f"/tmp/scratch-{uuid.uuid4().hex}"
    script = (
        f"print('read', open({str(data)!r}).read()); open({str(data)!r}, 'w').write('the pod\\'s'); "
        f"open({created!r}, 'w').write('scratch')"
    )
    running = run_to_end(executor, a_pod("tmp-user", python(script)), POD_RUN_S)
    assert running.phase == "Succeeded", running.tail()
    assert "read this machine's" in running.tail()
    assert data.read_text() == "this machine's"
    assert not Path(created).exists()


def test_the_executors_files_are_hidden_from_its_pods(host_dir):
    """Every pod's volumes and logs are under the executor's root; a pod sees only its own volumes."""
    with PodExecutor(host_dir / "executor", LoopbackNetwork("a test")) as executor:
        script = f"import os; print('sees the logs:', os.path.exists({str(executor.logs_dir)!r}))"
        running = run_to_end(executor, a_pod("looker", python(script)), POD_RUN_S)
    assert running.phase == "Succeeded", running.tail()
    assert executor.logs_dir.is_dir()
    assert "sees the logs: False" in running.tail()


def test_a_volume_that_cannot_be_mounted_fails_the_container_before_its_command_runs(executor, tmp_path):
    missing = {"name": "gone", "hostPath": {"path": str(tmp_path / "no-such-directory")}}
    pod = a_pod("unmountable", python("print('the command ran')"), [missing], [{"name": "gone", "mountPath": "/data"}])
    running = run_to_end(executor, pod, POD_RUN_S)
    assert running.phase == "Failed"
    assert running.status()["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 128
    assert "cannot make the container's filesystem: mount" in running.tail()
    assert "the command ran" not in running.tail()


def test_a_read_only_mount_cannot_be_written(executor):
    script = (
        "import errno\n"
        "try:\n    open('/output/x', 'w')\n"
        "except OSError as error:\n    print('refused', errno.errorcode[error.errno])"
    )
    pod = a_pod("reader", python(script), [OUTPUT], [{**AT_OUTPUT, "readOnly": True}])
    running = run_to_end(executor, pod, POD_RUN_S)
    assert running.phase == "Succeeded", running.tail()
    assert "refused EROFS" in running.tail()
    assert not (executor.pod_dir(pod) / "volumes" / "output" / "x").exists()
