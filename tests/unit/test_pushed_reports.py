"""Progress a script of one's own pushes (the Kubeflow Trainer status protocol): what of a report the status takes
(validation/trainer_status.py), where pods are told to send it (render/status_reports.py), who may send it and
what housekeeping writes of it, with the hang promise the operator makes for the script
(controller/reporters.py, report_server.py). The real endpoint, tokens and TokenReviews:
tests/e2e/test_status_reports.py."""

from __future__ import annotations

import base64
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from scaletrain_operator.api.timestamps import parse_timestamp
from scaletrain_operator.controller import reporters
from scaletrain_operator.controller.cache import Cache
from scaletrain_operator.controller.main import status_reports_problem
from scaletrain_operator.controller.reconcile import decide
from scaletrain_operator.controller.reporters import Senders, pushed_progress
from scaletrain_operator.controller.settings import OperatorConfig
from scaletrain_operator.policy.hang import broken_promise, stalled_message
from scaletrain_operator.render.child_annotations import GANG_GENERATION_ANNOTATION, hash_of, with_spec_hash
from scaletrain_operator.render.children import render_job
from scaletrain_operator.render.status_reports import AUDIENCE, CA_ANNOTATION, Endpoint, reporting_to
from scaletrain_operator.report_server import Refused, Report, Reports, Sender
from scaletrain_operator.validation.progress_answer import Unreadable, status_patch
from scaletrain_operator.validation.trainer_status import parse_trainer_status
from scaletrain_testing.gang_objects import cached_gang_job, gang_job, gang_pod, observed, scaletrain_job
from scaletrain_testing.jobs import DELETE, NAMESPACE, merge_patched, running_status, stored_job

OWN_SCRIPT = {"training": DELETE, "command": ["python", "train.py"]}
ENDPOINT = Endpoint("https://scaletrain-status-reports.scaletrain-system.svc", "-----BEGIN CERTIFICATE-----")
NOW = datetime(2026, 12, 5, 8, 0, tzinfo=timezone.utc)
POD_ADDRESS = "10.1.0.7"
JOB = (NAMESPACE, "demo")


def report(**status) -> bytes:
    return json.dumps({"trainerStatus": status}).encode()


def test_a_report_of_hfs_kubeflow_callback_becomes_step_loss_eta_and_named_metrics():
    body = report(
        lastUpdatedTime="2026-12-05T07:59:58.123456+00:00",  # Python's isoformat, as the callback sends it
        progressPercentage=42,
        estimatedRemainingSeconds=180,
        metrics=[
            {"name": "loss", "value": "2.5"},
            {"name": "current_step", "value": "21"},
            {"name": "total_steps", "value": "50"},
            {"name": "current_epoch", "value": "0.42"},
            {"name": "learning_rate", "value": "3e-05"},
            {"name": "grad_norm", "value": 1.5},
        ],
    )
    assert parse_trainer_status(body) == (
        {
            "updatedAt": "2026-12-05T07:59:58.123456+00:00",
            "progressPercentage": 42,
            "etaSeconds": 180,
            "loss": 2.5,
            "step": 21,
            "maxSteps": 50,
            "metrics": {"current_epoch": 0.42, "grad_norm": 1.5, "learning_rate": 3e-05},
        },
        (),
    )


def test_a_report_keeps_only_what_fits_the_status_and_a_nan_loss_is_a_divergence():
    body = report(
        progressPercentage=250,  # out of range: left out
        estimatedRemainingSeconds="soon",
        lastUpdatedTime="yesterday",
        metrics=[
            {"name": "loss", "value": "nan"},
            {"name": "current_step", "value": "2.5"},  # not a whole step
            {"name": "bad name!", "value": "1"},
            {"name": "note", "value": "fast"},
            {"name": "inf_metric", "value": "inf"},
            *({"name": f"m{i:02}", "value": str(i)} for i in range(20)),
        ],
    )
    progress, left_out = parse_trainer_status(body)
    assert progress["lossFinite"] is False and "loss" not in progress
    assert set(progress) == {"lossFinite", "metrics"}
    assert list(progress["metrics"]) == [f"m{i:02}" for i in range(16)]  # the first 16 by name
    assert left_out == ("m16", "m17", "m18", "m19")


@pytest.mark.parametrize("body", [b"[]", b"not json", b'{"status": {}}', b'{"trainerStatus": 3}', b"{" * 5000])
def test_a_body_that_is_no_report_is_unreadable(body):
    with pytest.raises(Unreadable):
        parse_trainer_status(body)


def test_pods_of_a_script_of_ones_own_are_told_where_to_report_without_changing_the_spec_hash():
    job = scaletrain_job(**OWN_SCRIPT)
    plain = with_spec_hash(render_job(job, 0))
    told = reporting_to(with_spec_hash(render_job(job, 0)), job, ENDPOINT)
    assert hash_of(told) == hash_of(plain)  # turning the endpoint on restarts no running gang
    pod = told["spec"]["template"]
    assert pod["metadata"]["annotations"][CA_ANNOTATION] == ENDPOINT.ca_pem
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "status-reports"]
    token, ca = volume["projected"]["sources"]
    assert token["serviceAccountToken"] == {"audience": AUDIENCE, "expirationSeconds": 600, "path": "token"}
    assert ca["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == f"metadata.annotations['{CA_ANNOTATION}']"
    (trainer,) = pod["spec"]["containers"]
    env = {var["name"]: var.get("value") for var in trainer["env"]}
    assert (
        env["KUBEFLOW_TRAINER_SERVER_URL"]
        == "https://scaletrain-status-reports.scaletrain-system.svc/v1/trainer-status"
    )
    mount = next(m for m in trainer["volumeMounts"] if m["name"] == "status-reports")
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == f"{mount['mountPath']}/token" and mount["readOnly"]
    assert env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] == f"{mount['mountPath']}/ca.crt"


def test_the_built_in_trainer_and_a_job_that_sets_the_url_itself_are_left_as_they_are():
    builtin = scaletrain_job()
    assert reporting_to(render_job(builtin, 0), builtin, ENDPOINT) == render_job(builtin, 0)
    own_url = scaletrain_job(**OWN_SCRIPT, env=[{"name": "KUBEFLOW_TRAINER_SERVER_URL", "value": "https://mine"}])
    (trainer,) = reporting_to(render_job(own_url, 0), own_url, ENDPOINT)["spec"]["template"]["spec"]["containers"]
    urls = [var["value"] for var in trainer["env"] if var["name"] == "KUBEFLOW_TRAINER_SERVER_URL"]
    assert urls == ["https://mine"]


def pushed_job(progress: dict | None = None, **spec) -> object:
    status = running_status(**({"progress": progress} if progress else {}))
    return scaletrain_job(status, **OWN_SCRIPT, **spec)


def test_housekeeping_writes_the_newest_report_of_the_current_gang_and_reads_rank_0_otherwise():
    job = pushed_job()
    newest = Report(0, {"step": 7, "loss": 1.25}, NOW)
    assert pushed_progress(job, 0, newest, NOW) == {"step": 7, "loss": 1.25, "reportedAt": "2026-12-05T08:00:00Z"}
    assert pushed_progress(job, 1, newest, NOW) is None  # an earlier gang's report
    assert pushed_progress(job, 0, None, NOW) is None  # nothing pushed: /progress is read


def test_after_an_operator_restart_the_gangs_earlier_reports_stand_and_its_silence_counts_from_the_restart():
    before = {"step": 7, "generation": 0, "reportedAt": "2026-12-05T07:00:00Z", "readAt": "2026-12-05T07:00:05Z"}
    job = pushed_job(before, statusReports={"hangAfterSeconds": 600})
    restarted = NOW
    pushed = pushed_progress(job, 0, None, restarted)
    assert pushed == {"step": 7, "reportedAt": "2026-12-05T07:00:00Z", "staleAfter": "2026-12-05T08:10:00Z"}
    assert pushed_progress(job, 1, None, restarted) is None  # a new gang that has not reported


def test_an_opted_in_script_silent_past_its_promise_is_hung_and_one_that_did_not_opt_in_never_is():
    last = NOW - timedelta(seconds=100)
    opted_in = pushed_job(statusReports={"hangAfterSeconds": 60})
    promise = pushed_progress(opted_in, 0, Report(0, {"step": 3}, last), last)["staleAfter"]
    assert parse_timestamp(promise) == last + timedelta(seconds=60)
    progress = {"step": 3, "generation": 0, "reportedAt": "2026-12-05T07:58:20Z", "staleAfter": promise}
    read_now = progress | {"readAt": "2026-12-05T08:00:00Z"}
    hung = pushed_job(read_now, statusReports={"hangAfterSeconds": 60})
    due = broken_promise(hung, 0, read_seconds=2.0)
    assert due == last + timedelta(seconds=60)
    assert "statusReports.hangAfterSeconds" in stalled_message(hung, due)
    silent = pushed_job()
    assert "staleAfter" not in pushed_progress(silent, 0, Report(0, {"step": 3}, last), last)


def token_for(namespace: str) -> str:
    claims = base64.urlsafe_b64encode(json.dumps({"kubernetes.io": {"namespace": namespace}}).encode()).decode()
    return f"header.{claims.rstrip('=')}.signature"


class Reviews:
    """The API server's verdicts on tokens, as a TokenReview's status holds them; each review counted."""

    def __init__(self, verdicts: dict[str, dict]):
        self.verdicts, self.asked = verdicts, 0

    def review_token(self, token: str, audience: str) -> dict:
        assert audience == AUDIENCE
        self.asked += 1
        return self.verdicts.get(token, {"authenticated": False, "error": "invalid bearer token"})


def bound_to(pod: str, uid: str) -> dict:
    extra = {"authentication.kubernetes.io/pod-name": [pod], "authentication.kubernetes.io/pod-uid": [uid]}
    user = {"username": f"system:serviceaccount:{NAMESPACE}:default", "extra": extra}
    return {"authenticated": True, "audiences": [AUDIENCE], "user": user}


def test_a_report_is_taken_only_from_a_running_pod_of_the_current_gang_that_its_own_job_owns():
    cache = Cache()
    cache.scaletrainjobs.put(stored_job(status=running_status(), **OWN_SCRIPT))
    cache.jobs.put(cached_gang_job())
    rank_1 = gang_pod(1, "Running", owner_uid="demo-g0-uid", resource_version=20)
    impostor = gang_pod(0, "Running", name="impostor", resource_version=21)  # the labels, but no owner
    for pod, uid in ((rank_1, "uid-r1"), (impostor, "uid-x")):
        pod["metadata"]["uid"] = uid
        cache.pods.put(pod)
    good, forged, stale, foreign = (token_for(NAMESPACE) + suffix for suffix in "1234")
    reviews = Reviews({
        good: bound_to(rank_1["metadata"]["name"], "uid-r1"),
        forged: bound_to("impostor", "uid-x"),
        stale: bound_to(rank_1["metadata"]["name"], "uid-of-a-pod-gone"),
        foreign: {"authenticated": True, "audiences": ["https://kubernetes.default.svc"], "user": {}},
    })  # fmt: skip
    senders = Senders(SimpleNamespace(review_token=reviews.review_token), cache)
    sender = senders.sender(good, POD_ADDRESS)
    assert sender.job == (NAMESPACE, "demo") and sender.gang_generation == 0
    senders.sender(good, POD_ADDRESS)
    assert reviews.asked == 1  # a known token is not reviewed again
    for token, status in ((forged, 403), (stale, 403), (foreign, 401), ("garbage", 401)):
        with pytest.raises(Refused) as refused:
            senders.sender(token, POD_ADDRESS)
        assert refused.value.status == status, token
    asked = reviews.asked
    with pytest.raises(Refused):
        senders.sender("garbage", POD_ADDRESS)
    assert reviews.asked == asked  # a refused token is remembered too
    # Restarted in place: the same Job and pod, which run the generation the Job's annotation names.
    restarted = cached_gang_job()
    restarted["metadata"] |= {"resourceVersion": "2", "annotations": {GANG_GENERATION_ANNOTATION: "2"}}
    cache.jobs.put(restarted)
    assert senders.sender(good, POD_ADDRESS) == Sender((NAMESPACE, "demo"), 2, 1)


def test_a_token_review_that_fails_is_a_503_asked_again_only_after_a_while_and_odd_claims_break_nothing():
    class Down:
        asked = 0

        def review_token(self, token: str, audience: str) -> dict:
            self.asked += 1
            raise OSError(111, "Connection refused")

    down = Down()
    senders = Senders(down, Cache())
    odd = "header." + base64.urlsafe_b64encode(b'{"kubernetes.io": "not an object"}').decode().rstrip("=") + ".sig"
    for _ in range(2):
        with pytest.raises(Refused) as refused:
            senders.sender(odd, POD_ADDRESS)
        assert refused.value.status == 503 and "Connection refused" in str(refused.value)
    assert down.asked == 1


def test_the_operator_refuses_to_start_an_endpoint_it_has_no_certificate_for(tmp_path):
    config = OperatorConfig(status_reports_port=9443, status_reports_url="https://reports.svc")
    missing = replace(config, status_reports_tls_dir=str(tmp_path))
    assert "lacks tls.crt, tls.key, ca.crt" in status_reports_problem(missing)
    assert "https://" in status_reports_problem(replace(config, status_reports_url="reports.svc"))
    assert status_reports_problem(OperatorConfig()) is None  # off


def test_a_divergence_after_a_finite_loss_leaves_no_loss_beside_it_and_a_finite_loss_ends_it():
    reports = Reports()
    reports.put(JOB, Report(0, {"step": 4, "loss": 2.5}, NOW))
    reports.put(JOB, Report(0, {"step": 5, "lossFinite": False}, NOW))
    assert reports.newest(JOB).progress == {"step": 5, "lossFinite": False}
    reports.put(JOB, Report(0, {"step": 6, "loss": 2.25}, NOW))
    assert reports.newest(JOB).progress == {"step": 6, "loss": 2.25}
    reports.put(JOB, Report(0, {"progressPercentage": 100}, NOW))  # HF's last report: no step, no loss
    assert reports.newest(JOB).progress == {"step": 6, "loss": 2.25, "progressPercentage": 100}


def test_each_answer_replaces_the_metrics_whole_so_that_names_never_pile_up_in_the_status():
    first = {f"m{i:02}": float(i) for i in range(16)}
    stored = merge_patched({}, status_patch({"step": 1, "metrics": first}, 0, {}))
    assert stored["metrics"] == first
    second = {f"n{i:02}": float(i) for i in range(16)}
    replaced = merge_patched(stored, status_patch({"step": 2, "metrics": second}, 0, stored))
    assert replaced["metrics"] == second and replaced["step"] == 2
    assert "metrics" not in merge_patched(replaced, status_patch({"step": 3}, 0, replaced))


def test_a_report_with_more_metrics_than_the_status_holds_keeps_the_first_by_name_and_names_the_rest():
    reports = Reports()
    body = report(metrics=[{"name": f"metric_{i:02}", "value": str(i)} for i in reversed(range(40))])
    progress, left_out = parse_trainer_status(body)
    assert list(progress["metrics"]) == [f"metric_{i:02}" for i in range(16)]
    assert left_out == tuple(f"metric_{i:02}" for i in range(16, 40))
    reports.put(JOB, Report(0, progress, NOW, left_out))
    reports.put(JOB, Report(0, {"step": 3}, NOW))  # no metrics: the last ones stand, and so does what they left out
    assert reports.newest(JOB).metrics_left_out == left_out
    reports.put(JOB, Report(0, {"metrics": {"loss_scale": 1.0}}, NOW))
    assert reports.newest(JOB).metrics_left_out == ()


class HeldReviews(Reviews):
    """Reviews that wait until released: TokenReviews under way, as a slow API server keeps them."""

    def __init__(self, verdicts: dict[str, dict]):
        super().__init__(verdicts)
        self.release, self.started = threading.Event(), threading.Semaphore(0)

    def review_token(self, token: str, audience: str) -> dict:
        self.started.release()
        assert self.release.wait(30)
        return super().review_token(token, audience)


def running_rank_1() -> tuple[Cache, str, dict]:
    """The operator's cache of a running gang with rank 1's pod, a token of that pod, and its review's verdict."""
    cache = Cache()
    cache.scaletrainjobs.put(stored_job(status=running_status(), **OWN_SCRIPT))
    cache.jobs.put(cached_gang_job())
    rank_1 = gang_pod(1, "Running", owner_uid="demo-g0-uid", resource_version=20)
    rank_1["metadata"]["uid"] = "uid-r1"
    cache.pods.put(rank_1)
    return cache, token_for(NAMESPACE) + "good", bound_to(rank_1["metadata"]["name"], "uid-r1")


def test_a_flood_of_tokens_that_claim_a_namespace_spends_only_the_flooders_reviews():
    cache, good, verdict = running_rank_1()
    reviews = HeldReviews({good: verdict})
    senders = Senders(SimpleNamespace(review_token=reviews.review_token), cache)
    with ThreadPoolExecutor(3) as pool:
        # Forged tokens that claim the job's namespace, from another tenant's pod: as many as it may have reviewed.
        flood = [pool.submit(senders.sender, token_for(NAMESPACE) + f"forged-{i}", "10.2.0.9") for i in range(2)]
        for _ in flood:
            assert reviews.started.acquire(timeout=30)
        with pytest.raises(Refused) as refused:
            senders.sender(token_for(NAMESPACE) + "forged-2", "10.2.0.9")
        assert refused.value.status == 429
        genuine = pool.submit(senders.sender, good, POD_ADDRESS)  # the job's own pod: reviewed all the same
        assert reviews.started.acquire(timeout=30)
        reviews.release.set()
        assert genuine.result(30).job == (NAMESPACE, "demo")
        for forged in flood:
            with pytest.raises(Refused):
                forged.result(30)


def test_the_verdict_caches_are_bounded_and_refused_tokens_evict_no_pods_verdict(monkeypatch):
    monkeypatch.setattr(reporters, "MAX_VERDICTS", 8)
    cache, good, verdict = running_rank_1()
    reviews = Reviews({good: verdict})
    senders = Senders(SimpleNamespace(review_token=reviews.review_token), cache)
    senders.sender(good, POD_ADDRESS)
    for i in range(100):
        with pytest.raises(Refused):
            senders.sender(f"forged-{i}", "10.2.0.9")
    assert len(senders._refused) == 8 and len(senders._accepted) == 1
    asked = reviews.asked
    senders.sender(good, POD_ADDRESS)
    assert reviews.asked == asked  # still known


def test_a_script_that_succeeds_shows_its_last_report_even_one_no_housekeeping_pass_copied():
    copied = {"step": 58, "progressPercentage": 96, "etaSeconds": 1, "metrics": {"epoch": 0.5}, "generation": 0,
              "reportedAt": "2026-12-05T07:59:55Z", "readAt": "2026-12-05T07:59:56Z"}  # fmt: skip
    job = scaletrain_job(running_status(progress=copied), nodes=1, **OWN_SCRIPT)
    pods = [gang_pod(0, "Succeeded", exit_code=0, termination_message="done")]
    last = Report(0, {"step": 58, "progressPercentage": 100, "etaSeconds": 0, "metrics": {"train_loss": 2.5}}, NOW)
    succeeded = decide(job, replace(observed(job, {0: gang_job(job, 0)}, pods), report=last), NOW)
    assert succeeded.status["phase"] == "Succeeded"
    final = merge_patched(copied, succeeded.status["progress"])
    assert final["progressPercentage"] == 100 and final["metrics"] == {"train_loss": 2.5} and "etaSeconds" not in final
    earlier_gang = replace(last, gang_generation=1)  # not this gang's: the status's last copy stands
    kept = decide(job, replace(observed(job, {0: gang_job(job, 0)}, pods), report=earlier_gang), NOW)
    assert merge_patched(copied, kept.status["progress"])["progressPercentage"] == 96
