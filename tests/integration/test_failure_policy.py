"""The failure policy on the real control plane, with the operator as the chart installs it:
failurePolicy rules, disruptions apart from crashes (a pod Failed with DisruptionTarget, as the kubelet
reports an eviction, and through the real eviction API), and the rule's name in the condition and the
Event. Without a kubelet, the tests report pod phases as a kubelet would."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from scaletrain_testing.operator_harness import condition, quiet_team

FAIL_ON_3 = {"name": "BadInput", "action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}
SIGTERM_IS_A_DISRUPTION = {
    "name": "SpotReclaim", "action": "RestartGangIgnoreLimit", "onExitCodes": {"operator": "In", "values": [143]}
}  # fmt: skip


@pytest.fixture(scope="module")
def team(control_plane, tmp_path_factory):
    """The chart installed for one watched namespace, and its operator running, for the whole module."""
    with quiet_team(control_plane, tmp_path_factory.mktemp("operator"), "policy") as team:
        yield team


def events_of(team, name, reason):
    return [message for _, said, message in team.events(name) if said == reason]


# (name, rules, maxRestarts, exit code, phase after, condition, its reason, restarts, disruptions)
RULE_CASES = [
    ("rule-fails", [FAIL_ON_3], 3, 3, "Failed", "Failed", "BadInput", 0, 0),
    ("rule-ignores-limit", [SIGTERM_IS_A_DISRUPTION], 0, 143, "Restarting", "Restarting", "SpotReclaim", 0, 1),
    ("no-rule-matches", [FAIL_ON_3], 1, 143, "Restarting", "Restarting", "Restarting", 1, 0),
    ("limit-without-rule", [], 0, 143, "Failed", "Failed", "RestartLimitReached", 0, 0),
]


@pytest.mark.parametrize(
    "name, rules, max_restarts, exit_code, phase, kind, reason, restarts, disruptions",
    RULE_CASES,
    ids=[case[0] for case in RULE_CASES],
)
def test_failure_policy_rules_decide_what_a_failed_pod_means(
    team, name, rules, max_restarts, exit_code, phase, kind, reason, restarts, disruptions
):
    team.submit(name, maxRestarts=max_restarts, failurePolicy={"rules": rules})
    pods = team.start_pods(f"{name}-g0")
    team.fail_pod(pods[1], exit_code)
    status = team.wait_phase(name, phase)["status"]
    assert condition({"status": status}, kind)["reason"] == reason
    assert (status["restarts"], status["disruptions"]) == (restarts, disruptions)
    said = events_of(team, name, "Failed" if phase == "Failed" else "Restarting")
    named = f"(failurePolicy rule {reason})" if reason in ("BadInput", "SpotReclaim") else ""
    assert said and named in said[0], said
    if phase == "Restarting":
        assert team.wait_status(name, lambda s: s.get("currentJob") == f"{name}-g1")


def test_an_evicted_pod_restarts_the_gang_without_using_max_restarts(team):
    """The kubelet's report of an eviction: the pod Failed (exit 137 here: the trainer had no time to
    checkpoint), with the condition DisruptionTarget True."""
    team.submit("evicted", maxRestarts=0)
    pods = team.start_pods("evicted-g0")
    team.fail_pod(pods[0], 137)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    disruption = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                  "message": "The node was low on resource: memory.", "lastTransitionTime": now}  # fmt: skip
    team.kube.set_status("pods", team.namespace, pods[0]["metadata"]["name"], {"conditions": [disruption]})
    status = team.wait_status("evicted", lambda s: s.get("disruptions") == 1)
    assert status["restarts"] == 0 and condition({"status": status}, "Restarting")["reason"] == "Disruption"
    assert "a disruption, not counted against maxRestarts" in events_of(team, "evicted", "Restarting")[0]
    assert team.wait_status("evicted", lambda s: s.get("currentJob") == "evicted-g1")
