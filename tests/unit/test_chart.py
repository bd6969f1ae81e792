"""The Helm chart, rendered and linted by Helm's own Go engine (helm-python-sdk), for the default
(cluster-wide, HA) values and the other install modes; every object checked against the official
Kubernetes schemas, the RBAC against the operator's permission table, the Deployment's arguments
against the operator's own command line."""

from __future__ import annotations

import base64

import helm_python
import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from scaletrain_operator.api import naming
from scaletrain_operator.api.job import parse_job
from scaletrain_operator.controller import rbac
from scaletrain_operator.controller.main import build_parser
from scaletrain_operator.render.children import render_network_policy
from scaletrain_testing.chart import CHART, RELEASE_NAMESPACE, load_chart, of_kind, render
from scaletrain_testing.jobs import base_job
from scaletrain_testing.kube_schema import schema_errors

# Chart.yaml's kubeVersion floor (the CRD's CEL rules use fieldPath and reason, new in 1.28), and the newest.
KUBERNETES_VERSIONS = ("1.28", "1.37")
VALUES = {
    "default": {},
    "namespaced": {"watchNamespaces": ["team-a", "team-b"]},
    "standalone": {
        "replicaCount": 1,
        "peering": {"enabled": False, "name": "scaletrain"},
        "metrics": {"enabled": False},
    },
    "monitored": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}}},
    "network-policy": {"watchNamespaces": ["team-a", "team-b"], "networkPolicy": {"enabled": True}},
}
STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)


@pytest.fixture(scope="module")
def chart():
    return load_chart()


def operator_container(objects):
    (deployment,) = of_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("mode", VALUES)
def test_strict_lint_passes(mode):
    report = helm_python.lint(
        CHART, VALUES[mode], strict=True, namespace=RELEASE_NAMESPACE, kube_version=f"v{KUBERNETES_VERSIONS[0]}.0"
    )
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []  # 2: warning, 3: error


@pytest.mark.parametrize("mode", VALUES)
def test_every_object_validates_against_the_kubernetes_schemas(chart, mode):
    peering_crds = yaml.safe_load_all((CHART / "crds/kopf-peering.yaml").read_text())
    peering_crds = {crd["spec"]["names"]["kind"]: crd for crd in peering_crds}
    objects = render(chart, VALUES[mode])
    for obj in objects:
        labels = obj["metadata"].get("labels", {})
        assert all(label in labels for label in STANDARD_LABELS), (obj["kind"], labels)
        if obj["kind"] in peering_crds:  # custom resources: the CRD's schema, as the API server checks them
            schema = peering_crds[obj["kind"]]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            body = {key: value for key, value in obj.items() if key not in ("apiVersion", "kind", "metadata")}
            assert schema_errors(schema, body) == []
        elif obj["kind"] != "ServiceMonitor":  # the Prometheus Operator's schema is not bundled
            for version in KUBERNETES_VERSIONS:
                kubernetes_validate.validate(obj, version, strict=True)


def test_the_chart_crds_are_the_generated_crd_and_kopf_peering(chart):
    crds = {obj["metadata"]["name"] for crd in chart.crds for obj in yaml.safe_load_all(crd["data"]) if obj}
    assert crds == {"scaletrainjobs.scaletrain.io", "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"}
    assert chart.metadata["kubeVersion"] == f">={KUBERNETES_VERSIONS[0]}.0-0"
    for path in sorted((CHART / "crds").glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            kubernetes_validate.validate(crd, KUBERNETES_VERSIONS[0], strict=True)


def test_the_rbac_rules_file_is_generated_from_the_operator_table():
    assert (CHART / "files/rbac-rules.yaml").read_text() == rbac.chart_rules_yaml(), "run `make generate`"


@pytest.mark.parametrize(
    ("mode", "clusterwide", "peering"),
    [("default", True, True), ("namespaced", False, True), ("standalone", True, False)],
)
def test_rbac_is_the_operator_table_for_the_scope(chart, mode, clusterwide, peering):
    objects = render(chart, VALUES[mode])
    expected = rbac.rules(rbac.permissions(clusterwide=clusterwide, peering=peering))
    (account,) = of_kind(objects, "ServiceAccount")
    subject = {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": RELEASE_NAMESPACE}
    (deployment,) = of_kind(objects, "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    status_reports = f"{account['metadata']['name']}-status-reports"  # status reports' own (a test below)

    def operators(kind):
        return [obj for obj in of_kind(objects, kind) if obj["metadata"]["name"] != status_reports]

    cluster_roles, cluster_bindings = operators("ClusterRole"), operators("ClusterRoleBinding")
    if clusterwide:
        assert operators("Role") == [] and operators("RoleBinding") == []
        (role,), (binding,) = cluster_roles, cluster_bindings
        assert role["rules"] == expected
        assert binding["roleRef"]["name"] == role["metadata"]["name"] and binding["subjects"] == [subject]
    else:  # nothing cluster-wide; a Role and RoleBinding in each watched namespace
        assert cluster_roles == [] and cluster_bindings == []
        watched = VALUES[mode]["watchNamespaces"]
        roles, bindings = operators("Role"), operators("RoleBinding")
        assert [r["metadata"]["namespace"] for r in roles] == [b["metadata"]["namespace"] for b in bindings] == watched
        assert all(role["rules"] == expected for role in roles)
        assert all(binding["subjects"] == [subject] for binding in bindings)


@pytest.mark.parametrize("mode", ["default", "namespaced", "standalone"])
def test_the_operator_arguments_parse_and_match_the_scope_and_peering(chart, mode):
    objects, values = render(chart, VALUES[mode]), VALUES[mode]
    container = operator_container(objects)
    args = build_parser().parse_args(container["args"])  # the real operator's command line accepts them
    watched = values.get("watchNamespaces", [])
    assert args.namespace == watched and args.all_namespaces == (not watched)
    peerings = of_kind(objects, "ClusterKopfPeering") + of_kind(objects, "KopfPeering")
    if mode == "standalone":
        assert args.standalone and peerings == [] and args.metrics_port == 0
    else:
        assert {p["metadata"]["name"] for p in peerings} == {args.peering}
        assert [p["metadata"].get("namespace") for p in peerings] == (watched or [None])
    ports = {port["name"]: port["containerPort"] for port in container.get("ports", [])}
    assert ports["healthz"] == args.liveness_port and container["livenessProbe"]["httpGet"]["port"] == "healthz"
    assert ports.get("metrics", 0) == args.metrics_port


def test_the_deployment_is_hardened_and_highly_available(chart):
    objects = render(chart, {})
    (deployment,) = of_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = operator_container(objects)
    assert deployment["spec"]["replicas"] == 2 and "--peering=scaletrain" in container["args"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    mounts = {mount["mountPath"]: mount.get("readOnly", False) for mount in container["volumeMounts"]}
    assert mounts == {"/tmp": False, "/etc/scaletrain/status-reports": True}  # writable scratch only


def test_metrics_service_and_service_monitor_select_the_operator(chart):
    objects = render(chart, VALUES["monitored"])
    (deployment,) = of_kind(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    (service,) = [s for s in of_kind(objects, "Service") if s["metadata"]["name"].endswith("-metrics")]
    (monitor,) = of_kind(objects, "ServiceMonitor")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert of_kind(render(chart, {}), "ServiceMonitor") == []  # off by default: needs the Prometheus Operator


def test_network_policies_are_the_operators_to_make_with_the_rights_to(chart):
    objects = render(chart, VALUES["network-policy"])
    args = build_parser().parse_args(operator_container(objects)["args"])
    assert args.network_policy_from == RELEASE_NAMESPACE
    for role in [r for r in of_kind(objects, "Role") if r["metadata"]["namespace"] != RELEASE_NAMESPACE]:
        assert {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["list", "create"]} in (
            role["rules"]
        )
    # The policy lets in the operator's pods by their labels, which the chart gives them.
    (deployment,) = of_kind(objects, "Deployment")
    policy = render_network_policy(parse_job(base_job()), RELEASE_NAMESPACE)
    operator_pods = policy["spec"]["ingress"][1]["from"][0]["podSelector"]["matchLabels"]
    assert operator_pods.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    for version in KUBERNETES_VERSIONS:  # the policy the operator makes, against the official schemas
        kubernetes_validate.validate(
            policy | {"metadata": policy["metadata"] | {"namespace": "team-a"}}, version, strict=True
        )
    default = render(chart, {})
    assert "--network-policy-from" not in " ".join(operator_container(default)["args"])
    assert not any(
        "networkpolicies" in rule["resources"] for role in of_kind(default, "ClusterRole") for rule in role["rules"]
    )


@pytest.mark.parametrize(
    ("values", "error", "names"),
    [
        ({"replicaCount": "two"}, helm_python.HelmValuesError, "/replicaCount"),
        ({"watchNamespace": ["team-a"]}, helm_python.HelmValuesError, "watchNamespace"),
        ({"watchNamespaces": ["Team_A"]}, helm_python.HelmValuesError, "/watchNamespaces/0"),
        ({"replicaCount": 3, "peering": {"enabled": False, "name": "x"}}, helm_python.HelmRenderError, "peering"),
        ({"metrics": {"port": 8081}}, helm_python.HelmRenderError, "livenessPort must differ"),
        ({"networkPolicy": {"enabled": True, "namespaces": ["a"]}}, helm_python.HelmValuesError, "/networkPolicy"),
    ],
)
def test_bad_values_are_refused_with_the_field_named(chart, values, error, names):
    with pytest.raises(error, match=names):
        render(chart, values)


@pytest.mark.parametrize(
    ("values", "made", "named"),
    [
        ({}, True, "scaletrain-capacity-probe"),
        # Cluster-scoped, named after the release's namespace: several namespaced releases do not claim one name.
        ({"watchNamespaces": ["team-a"]}, True, "scaletrain-scaletrain-system-capacity-probe"),
        ({"watchNamespaces": ["team-a"], "capacityProbePriorityClass": "probes"}, False, "probes"),
    ],
)
def test_capacity_probes_get_a_class_that_preempts_nothing_where_the_chart_may_make_one(chart, values, made, named):
    objects = render(chart, values)
    classes = of_kind(objects, "PriorityClass")
    if made:
        (made_class,) = classes
        assert (made_class["value"], made_class["preemptionPolicy"]) == (0, "Never")
        assert made_class["metadata"]["name"] == named
    else:
        assert classes == []
    given = build_parser().parse_args(operator_container(objects)["args"]).probe_priority_class
    assert given == named


def test_the_chart_renders_the_dashboard_the_rules_and_the_pod_monitor_only_when_asked():
    kinds = {"PrometheusRule", "PodMonitor", "ConfigMap"}
    assert not kinds & {obj["kind"] for obj in render(load_chart(), {})}
    enabled = {name: {"enabled": True} for name in ("dashboard", "podMonitor", "alerts")}
    objects = render(load_chart(), {"monitoring": enabled, "watchNamespaces": ["team-a"]})
    assert kinds <= {obj["kind"] for obj in objects}
    (configmap,) = [obj for obj in objects if obj["kind"] == "ConfigMap"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert '"uid": "scaletrain-jobs"' in configmap["data"]["scaletrain.json"]
    (monitor,) = [obj for obj in objects if obj["kind"] == "PodMonitor"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}
    alerts = {rule["alert"] for obj in objects if obj["kind"] == "PrometheusRule"
              for group in obj["spec"]["groups"] for rule in group["rules"]}  # fmt: skip
    assert "ScaleTrainLowMFU" not in alerts and "ScaleTrainJobHung" in alerts  # low MFU: off unless a bound is set


@pytest.mark.parametrize("mode", ["default", "namespaced"])
def test_the_status_report_endpoint_has_a_certificate_for_its_service_and_may_review_tokens(chart, mode):
    objects = render(chart, VALUES[mode])
    container = operator_container(objects)
    args = build_parser().parse_args(container["args"])
    (secret,) = of_kind(objects, "Secret")
    (service,) = [s for s in of_kind(objects, "Service") if s["metadata"]["name"] == secret["metadata"]["name"]]
    host = f"{service['metadata']['name']}.{RELEASE_NAMESPACE}.svc"
    assert args.status_reports_url == f"https://{host}"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "status-reports", "protocol": "TCP"}
    ]
    assert ports["status-reports"] == args.status_reports_port
    volume = next(v for v in of_kind(objects, "Deployment")[0]["spec"]["template"]["spec"]["volumes"] if "secret" in v)
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert mount["mountPath"] == args.status_reports_tls_dir
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert host in names
    cert.verify_directly_issued_by(ca)
    (role,) = [r for r in of_kind(objects, "ClusterRole") if r["metadata"]["name"] == secret["metadata"]["name"]]
    assert role["rules"] == rbac.rules(rbac.STATUS_REPORTS)  # cluster-scoped, in a namespaced install too
    # The Service reaches the active replica alone, which labels its own pod (known from the downward API).
    (own_pod,) = [r for r in of_kind(objects, "Role") if r["metadata"]["name"] == secret["metadata"]["name"]]
    assert own_pod["metadata"]["namespace"] == RELEASE_NAMESPACE and own_pod["rules"] == rbac.rules(rbac.OWN_POD)
    assert service["spec"]["selector"][naming.ACTIVE_REPLICA_LABEL] == "true"
    env = {var["name"]: var["valueFrom"]["fieldRef"]["fieldPath"] for var in container["env"]}
    assert env == {
        "SCALETRAIN_OPERATOR_POD_NAME": "metadata.name",
        "SCALETRAIN_OPERATOR_POD_NAMESPACE": "metadata.namespace",
    }
    assert of_kind(render(chart, {"statusReports": {"enabled": False}}), "Secret") == []
