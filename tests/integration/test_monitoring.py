"""The chart's dashboard and alerts, tested rather than only rendered: promtool runs a unit test of every alert
rule (tests/integration/alerts_test.yaml), and lints real scrapes of the operator, running on the control plane
with a job whose rank 0 reports, and of a trainer training; every series the dashboard or a rule names is in
one of those scrapes. promtool is built with the control plane (`make control-plane`)."""

from __future__ import annotations

import os
import re

import pytest
import yaml

from scaletrain_testing.kube import Kube
from scaletrain_testing.monitoring import (
    ALERT_TESTS,
    alert_rules,
    dashboard_expressions,
    exported,
    promtool,
    promtool_path,
    rule_expressions,
    scrape,
    series_named,
    write_alert_tests,
)
from scaletrain_testing.operator_harness import PROGRESS_EACH_READ, Team, install_watching, operator_process
from scaletrain_testing.progress_server import RANK0_PROGRESS, ProgressServer
from scaletrain_testing.trainer_runs import config_for, free_port, start_pod
from scaletrain_testing.waiting import wait_until


@pytest.fixture(scope="module", autouse=True)
def promtool_built():
    if not os.access(promtool_path(), os.X_OK):
        if os.environ.get("CI") == "true":
            pytest.fail(f"promtool missing in {promtool_path().parent}: `make control-plane` builds it")
        pytest.skip(f"promtool missing in {promtool_path().parent}: run `make control-plane`")


def test_every_alert_fires_and_stays_quiet_as_its_unit_tests_say(tmp_path):
    tests = write_alert_tests(tmp_path)
    checked = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", tests.name, cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {rule["alert"] for group in alert_rules()["groups"] for rule in group["rules"]}
    cases = [case for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    firing = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert firing == alerts
    # A rule that fired for anything at all would pass a test that only expects it to fire.
    assert quiet >= alerts - {"ScaleTrainCheckpointsFailing"}  # its test has a job within its intervals beside


@pytest.fixture(scope="module")
def operator_scrape(control_plane, tmp_path_factory):
    """/metrics of the operator as the chart installs it, once it has reconciled a Running job (with checkpoints)
    whose rank 0 reports progress, and reported it in a housekeeping pass."""
    namespace = control_plane.create_namespace(f"monitoring-{free_port()}")
    install = install_watching(control_plane, namespace, tmp_path_factory.mktemp("operator"))
    port = free_port()
    args = (*PROGRESS_EACH_READ, "--liveness-port", "0", "--metrics-port", str(port))
    env = {"SCALETRAIN_OPERATOR_PROGRESS_URL": "http://127.0.0.1:{port}/progress"}
    with ProgressServer(RANK0_PROGRESS | {"checkpointStep": 40}) as rank_0, operator_process(install, *args, env=env):
        team = Team(Kube(control_plane.api_client()), namespace)
        training = {"metricsPort": rank_0.port, "checkpoint": {"dir": "/checkpoints", "everySteps": 20}}
        team.submit("watched", training=training)
        team.start_pods("watched-g0")
        team.wait_status("watched", lambda status: (status.get("progress") or {}).get("checkpointStep") == 40)
        url = f"http://127.0.0.1:{port}/metrics"

        def reported() -> str | None:
            text = scrape(url)
            return text if "scaletrain_job_checkpoint_step{" in text else None

        yield wait_until(reported, timeout_s=30, what="the job's progress among the operator's metrics")


@pytest.fixture(scope="module")
def trainer_scrape(tmp_path_factory):
    """/metrics of a trainer training (one process, checkpoints every 5 steps), once it has saved one."""
    directory = tmp_path_factory.mktemp("trainer")
    config = config_for(directory, {"maxSteps": 100000}, checkpoints=True)
    pod = start_pod(directory, config, nproc=1)
    try:
        url = f"http://127.0.0.1:{config['metricsPort']}/metrics"

        def saved() -> str | None:
            if pod.process.poll() is not None:
                raise AssertionError(f"the trainer exited {pod.process.returncode}:\n{pod.log.read_text()[-3000:]}")
            try:
                text = scrape(url)
            except OSError:
                return None
            return text if re.search(r"^scaletrain_checkpoint_step [1-9]", text, re.MULTILINE) else None

        yield wait_until(saved, timeout_s=180, what="a checkpoint among the trainer's metrics")
    finally:
        pod.kill()


def test_the_scrapes_pass_promtools_lint(operator_scrape, trainer_scrape):
    for text in (operator_scrape, trainer_scrape):
        linted = promtool("check", "metrics", stdin=text)
        assert linted.returncode == 0, linted.stdout + linted.stderr


def test_every_series_the_dashboard_and_the_rules_name_is_in_a_real_scrape(operator_scrape, trainer_scrape):
    named = set().union(*map(series_named, dashboard_expressions() + rule_expressions()))
    assert named  # the parse found the expressions' series at all
    scraped = exported(operator_scrape) | exported(trainer_scrape) | {"up"}  # `up`: Prometheus's own, per target
    assert named - scraped == set()
    # The per-job series carry the job's namespace and name, as the dashboard's variables select them.
    assert 'scaletrain_job_tokens_per_second{name="watched",namespace="monitoring-' in operator_scrape
