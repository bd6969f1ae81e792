"""The chart's dashboard and alert rules against what the operator and the trainers export: promtool (built by
`make control-plane` into the control plane's binaries), the rules as the chart renders them, and the series
names a PromQL expression reads."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from .chart import CHART, load_chart, render
from .control_plane import binaries_dir

ALERT_TESTS = Path(__file__).resolve().parents[1] / "integration" / "alerts_test.yaml"
# The values the alert unit tests are written for: the chart's defaults, and the alert that is off by default on.
ALERT_VALUES = {"monitoring": {"alerts": {"enabled": True, "lowMfu": {"below": 0.3}}}}
# A series name in PromQL: ours all start with scaletrain_; Prometheus's own `up` is read with a selector.
SERIES = re.compile(r"\b(scaletrain_[a-z0-9_]+)\b|\b(up)\{")


def promtool_path() -> Path:
    return binaries_dir() / "promtool"


def promtool(*args: str, cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """promtool with `args`; its output in .stdout, whatever it exits with."""
    return subprocess.run(
        [str(promtool_path()), *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120, check=False
    )


def alert_rules(values: dict[str, Any] = ALERT_VALUES) -> dict[str, Any]:
    """The rule groups of the chart's PrometheusRule for `values`, as a Prometheus rule file holds them."""
    (rule,) = [obj for obj in render(load_chart(), values) if obj["kind"] == "PrometheusRule"]
    return {"groups": rule["spec"]["groups"]}


def write_alert_tests(directory: Path) -> Path:
    """The rules (ALERT_VALUES) and their unit tests side by side in `directory`; the tests' path."""
    (directory / "rules.yaml").write_text(yaml.safe_dump(alert_rules(), sort_keys=False))
    return Path(shutil.copy(ALERT_TESTS, directory / ALERT_TESTS.name))


def dashboard() -> dict[str, Any]:
    return json.loads((CHART / "files" / "dashboard.json").read_text())


def dashboard_expressions() -> list[str]:
    return [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]


def rule_expressions() -> list[str]:
    return [rule["expr"] for group in alert_rules()["groups"] for rule in group["rules"]]


def series_named(expression: str) -> set[str]:
    return {ours or prometheus for ours, prometheus in SERIES.findall(expression)}


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode()


def exported(text: str) -> set[str]:
    """The series names of a /metrics answer (a histogram's _bucket, _sum and _count as they are scraped)."""
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
