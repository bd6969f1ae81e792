"""The node tier on kind, where Docker is (.github/workflows/e2e-kind.yaml): the same tests as on this
machine's cluster (local_cluster.py), against a kind node running the images of `make images`, loaded
into it, with the chart installed the same way. Commands on the node go through `docker exec`."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from .control_plane import ControlPlane
from .local_cluster import RealCluster, built_images, run_command

NAME = "scaletrain"
NODE = f"{NAME}-control-plane"  # kind's one node: its container, and its node name


class KindCluster(RealCluster):
    node_name = NODE

    def __init__(self) -> None:
        self.work_dir = Path(tempfile.mkdtemp(prefix="scaletrain-kind-"))
        self.kubeconfig = self.work_dir / "kubeconfig"

    def up(self) -> Path:
        run_command(
            "kind", "create", "cluster", f"--name={NAME}", f"--kubeconfig={self.kubeconfig}", "--wait=180s", timeout=600
        )
        self.control_plane = ControlPlane.clients_for(self.kubeconfig, self.work_dir)
        images = built_images()
        for reference in images.values():
            archive = self.work_dir / "image.tar"
            run_command("buildah", "push", "--quiet", reference, f"docker-archive:{archive}:{reference}", timeout=1200)
            run_command("kind", "load", "image-archive", str(archive), f"--name={NAME}", timeout=1200)
            archive.unlink()
        self.install_chart(images["OPERATOR_IMAGE"])
        return self.kubeconfig

    def down(self) -> list[str]:
        run_command("kind", "delete", "cluster", f"--name={NAME}", timeout=300)
        return [NODE]

    def volumes_dir(self) -> str:
        return "/var/local/scaletrain-volumes"

    def node_run(self, *command: str, timeout: float = 60) -> str:
        return run_command("docker", "exec", NODE, *command, timeout=timeout).stdout

    def ctr(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return run_command("docker", "exec", NODE, "ctr", *args, check=check, timeout=timeout)
