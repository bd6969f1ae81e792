"""The Helm chart rendered by Helm's own Go engine (helm-python-sdk), as `helm install` would render it."""

from __future__ import annotations

from typing import Any

import helm_python
import yaml

from .jobs import REPO

CHART = REPO / "charts" / "scaletrain"
RELEASE, RELEASE_NAMESPACE = "scaletrain", "scaletrain-system"


def load_chart() -> helm_python.Chart:
    return helm_python.Chart.load(CHART)


def render(
    chart: helm_python.Chart, values: dict[str, Any], namespace: str = RELEASE_NAMESPACE, release: str = RELEASE
) -> list[dict[str, Any]]:
    """The chart's objects for `values` (its templates; the CRDs in crds/ are `chart_crds()`)."""
    manifests = chart.render(values, name=release, namespace=namespace, is_install=True)
    return [
        obj
        for template, text in sorted(manifests.items())
        if template.endswith(".yaml")
        for obj in yaml.safe_load_all(text)
        if obj
    ]


def chart_crds() -> list[dict[str, Any]]:
    """The CRDs Helm installs before the templates: the ScaleTrainJob's and kopf's peering ones."""
    return [crd for path in sorted((CHART / "crds").glob("*.yaml")) for crd in load_yaml_all(path)]


def load_yaml_all(path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]
