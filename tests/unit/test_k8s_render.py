"""The Kubernetes manifests as an operator applies them: each overlay rendered by kustomize
(``kubectl kustomize``, kustomize built into kubectl), every built-in object checked against the
Kubernetes schema (kubernetes-validate, strict: unknown fields are errors), the KEDA and
Prometheus Operator objects checked for structure and for what they refer to, and the operating
rules: every role waits for the migration, every worker pool scales on its queue, the general pool
never stops, budgets bound disruptions, probes are cheap, certificates can rotate.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import time
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.services import ON_CI, PROJECT_ROOT

K8S = PROJECT_ROOT / "deploy" / "k8s"
OVERLAYS = sorted(p.parent.name for p in (K8S / "overlays").glob("*/kustomization.yaml"))
#: the oldest Kubernetes minor the manifests promise to run on (policy/v1, autoscaling/v2, ...)
KUBERNETES_VERSION = "1.29.0"
KEDA_TRIGGERS = {"redis", "prometheus", "rabbitmq", "postgresql", "cpu", "memory"}


def kustomize() -> list[str]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if ON_CI:
            pytest.fail("kubectl (kustomize) is needed to render deploy/k8s")
        pytest.skip("kubectl is not installed")
    return [kubectl, "kustomize"]


@cache
def _render(overlay: str) -> tuple[dict[str, Any], ...]:
    out = subprocess.run(
        [*kustomize(), str(K8S / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def render(overlay: str) -> list[dict[str, Any]]:
    return copy.deepcopy(list(_render(overlay)))


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    return list(deployment["spec"]["template"]["spec"]["containers"])


def queues_of(deployment: dict[str, Any]) -> list[str] | None:
    """The ``-Q`` queues of a worker Deployment, None for a general one."""
    [container] = containers(deployment)
    argv = container["command"] + container.get("args", [])
    if "-Q" not in argv:
        return None
    return str(argv[argv.index("-Q") + 1]).split(",")


def workers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d
        for d in of_kind(docs, "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_builtin_object_passes_the_kubernetes_schema(overlay: str) -> None:
    checked, custom = 0, set()
    for doc in render(overlay):
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
            checked += 1
        except kubernetes_validate.SchemaNotFoundError:
            custom.add(doc["kind"])
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']}: {exc}")
    # Only the two custom resources have no built-in schema (they are checked below)
    assert custom == {"ScaledObject", "ServiceMonitor", "PrometheusRule"}
    assert checked >= 15


def test_the_schema_check_refuses_a_broken_object() -> None:
    # Given a rendered Deployment with a misspelt field and a wrong type
    [deployment] = [d for d in render("production") if d["metadata"]["name"] == "broker-beat"]
    deployment["spec"]["replica"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    deployment["spec"].pop("replica")
    deployment["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_everything_lives_in_the_broker_namespace_from_one_image(overlay: str) -> None:
    docs = render(overlay)
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "broker", doc["metadata"]["name"]
    images = {
        c["image"]
        for d in [*of_kind(docs, "Deployment"), *of_kind(docs, "Job")]
        for c in d["spec"]["template"]["spec"]["containers"]
        + d["spec"]["template"]["spec"].get("initContainers", [])
    }
    assert len(images) == 1, images


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_migration_is_a_job_every_role_waits_for(overlay: str) -> None:
    docs = render(overlay)
    [job] = of_kind(docs, "Job")
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["broker", "db", "upgrade"]
    for deployment in of_kind(docs, "Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        [init] = [c for c in spec.get("initContainers", []) if c["name"] == "wait-for-migration"]
        assert "broker db check" in " ".join(init["command"]), deployment["metadata"]["name"]
        # with the same settings as the role, and the volumes it mounts
        role_sources = containers(deployment)[0]["envFrom"]
        assert all(source in role_sources for source in init["envFrom"])
        volumes = {v["name"] for v in spec["volumes"]}
        assert {m["name"] for m in init["volumeMounts"]} <= volumes


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_worker_pool_scales_on_its_queue_and_the_general_pool_never_stops(
    overlay: str,
) -> None:
    docs = render(overlay)
    deployments = {d["metadata"]["name"]: d for d in of_kind(docs, "Deployment")}
    scaled = {s["spec"]["scaleTargetRef"]["name"]: s for s in of_kind(docs, "ScaledObject")}
    pools = workers(docs)
    # Then exactly one pool consumes every queue (and so the maintenance queue)
    general = [p for p in pools if queues_of(p) is None]
    assert len(general) == 1
    for pool in pools:
        name = pool["metadata"]["name"]
        # And each pool has its ScaledObject, which KEDA can act on
        spec = scaled[name]["spec"]
        assert scaled[name]["apiVersion"] == "keda.sh/v1alpha1"
        assert spec["scaleTargetRef"].get("kind", "Deployment") == "Deployment"
        assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
        assert "replicas" not in pool["spec"], name
        triggers = spec["triggers"]
        assert triggers, name
        for trigger in triggers:
            assert trigger["type"] in KEDA_TRIGGERS, trigger
            # KEDA reads trigger metadata as strings only
            assert all(isinstance(v, str) for v in trigger["metadata"].values()), trigger
        lists = {t["metadata"]["listName"] for t in triggers if t["type"] == "redis"}
        queues = queues_of(pool)
        if queues is None:
            assert spec["minReplicaCount"] >= 1, "the general pool must always run"
            assert "broker.default" in lists
        else:
            assert lists == set(queues), name
    # And every ScaledObject targets a Deployment of this render
    assert set(scaled) <= set(deployments)
    # And the one HorizontalPodAutoscaler (the console's) targets no worker pool KEDA scales
    hpas = {h["spec"]["scaleTargetRef"]["name"] for h in of_kind(docs, "HorizontalPodAutoscaler")}
    assert hpas == {"broker-console"}
    assert not hpas & set(scaled)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_disruption_budgets_cover_every_replicated_role(overlay: str) -> None:
    docs = render(overlay)
    budgets = of_kind(docs, "PodDisruptionBudget")
    scaled = {
        s["spec"]["scaleTargetRef"]["name"]
        for s in [*of_kind(docs, "ScaledObject"), *of_kind(docs, "HorizontalPodAutoscaler")]
    }
    for deployment in of_kind(docs, "Deployment"):
        name = deployment["metadata"]["name"]
        replicated = deployment["spec"].get("replicas", 1) > 1 or name in scaled
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        covering = [
            b for b in budgets if labels_match(b["spec"]["selector"]["matchLabels"], labels)
        ]
        if replicated:
            assert len(covering) == 1, name
        # A budget by maxUnavailable never blocks a node drain, even over a single replica
        # (minAvailable 1 over one pod would).
        for budget in covering:
            assert budget["spec"].get("maxUnavailable") == 1, name
            assert "minAvailable" not in budget["spec"], name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_start_no_python_process(overlay: str) -> None:
    for deployment in of_kind(render(overlay), "Deployment"):
        for container in containers(deployment):
            for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
                command = " ".join(container.get(kind, {}).get("exec", {}).get("command", []))
                for heavy in ("python", "celery", "broker "):
                    assert heavy not in command, (deployment["metadata"]["name"], kind)


def run_probe(command: list[str], heartbeat: Path, path_in_pod: str) -> int:
    local = [w.replace(path_in_pod, str(heartbeat)) for w in command]
    return subprocess.run(local, timeout=10, check=False).returncode


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_worker_liveness_probe_reads_the_heartbeat_file_the_worker_touches(
    overlay: str, tmp_path: Path
) -> None:
    for pool in workers(render(overlay)):
        [container] = containers(pool)
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        path = env["BROKER_WORKER_HEARTBEAT_FILE"]
        command = container["livenessProbe"]["exec"]["command"]
        assert path in " ".join(command)
        heartbeat = tmp_path / "alive"
        # Given no file yet: the probe fails
        assert run_probe(command, heartbeat, path) != 0
        # A fresh file: it passes
        heartbeat.touch()
        assert run_probe(command, heartbeat, path) == 0
        # A file untouched for ten minutes: it fails
        old = time.time() - 600
        os.utime(heartbeat, (old, old))
        assert run_probe(command, heartbeat, path) != 0
        # And the kubelet waits minutes before a restart (a Redis blip pauses the touches)
        probe = container["livenessProbe"]
        assert probe["periodSeconds"] * probe["failureThreshold"] >= 120
        heartbeat.unlink()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_certificates_are_mounted_so_a_rotated_secret_reaches_the_listener(overlay: str) -> None:
    [ingress] = [
        d
        for d in of_kind(render(overlay), "Deployment")
        if d["metadata"]["name"] == "broker-ingress"
    ]
    spec = ingress["spec"]["template"]["spec"]
    secret_volumes = {v["name"] for v in spec["volumes"] if "secret" in v}
    for mount in containers(ingress)[0]["volumeMounts"]:
        if mount["name"] in secret_volumes:
            # a subPath mount is never updated by the kubelet
            assert "subPath" not in mount


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_service_monitor_finds_a_metrics_port_on_every_counting_role(overlay: str) -> None:
    docs = render(overlay)
    [monitor] = of_kind(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [
        s for s in of_kind(docs, "Service") if labels_match(selector, s["metadata"]["labels"])
    ]
    ports = {p["name"] for s in services for p in s["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in ports, endpoint
    components = {s["spec"]["selector"]["app.kubernetes.io/component"] for s in services}
    assert components == {"ingress", "internal", "worker"}
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["broker"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_are_kept(overlay: str) -> None:
    names = {p["metadata"]["name"] for p in of_kind(render(overlay), "NetworkPolicy")}
    assert names == {"broker-internal", "broker-background", "broker-ingress", "broker-console"}


def test_the_overlays_are_production_and_trial() -> None:
    assert OVERLAYS == ["production", "trial"]
    # and only the trial carries (placeholder) secrets
    assert not of_kind(render("production"), "Secret")
    assert {s["metadata"]["name"] for s in of_kind(render("trial"), "Secret")} == {
        "broker-tls",
        "broker-credentials",
        "broker-console",
        "broker-flower",
    }


def test_the_readme_applies_the_overlays_it_names() -> None:
    readme = (PROJECT_ROOT / "deploy" / "README.md").read_text(encoding="utf-8")
    for overlay in OVERLAYS:
        assert f"kubectl apply -k deploy/k8s/overlays/{overlay}" in readme
    assert "kubectl kustomize deploy/k8s/overlays/production" in readme


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_worker_pool_drains_on_sigterm_within_its_grace(overlay: str) -> None:
    docs = render(overlay)
    [config] = [c for c in of_kind(docs, "ConfigMap") if c["metadata"]["name"] == "broker-config"]
    drain = float(config["data"]["BROKER_DRAIN_TIMEOUT"])
    for pool in workers(docs):
        [container] = containers(pool)
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert env["REMAP_SIGTERM"] == "SIGQUIT", pool["metadata"]["name"]
        grace = pool["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace > drain + 10, pool["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_rendered_manifests_contain_the_console(overlay: str) -> None:
    docs = render(overlay)
    # Then the console runs as its own Deployment, with the console command
    [console] = [
        d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] == "broker-console"
    ]
    [container] = containers(console)
    assert container["command"] == [
        "gunicorn", "-c", "config/gunicorn_console.conf.py", "broker.serving.wsgi:console"
    ]  # fmt: skip
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env["BROKER_CONSOLE_BIND"] == "0.0.0.0:5090"
    # And every replica reads the one signing key from a Secret
    secrets = {s["secretRef"]["name"] for s in container["envFrom"] if "secretRef" in s}
    assert "broker-console" in secrets
    # And it is probed over HTTP: liveness /healthz, readiness /readyz, on its port
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "console"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "console"}
    # And a Service, a NetworkPolicy and an HPA select or target it
    labels = console["spec"]["template"]["metadata"]["labels"]
    [service] = [s for s in of_kind(docs, "Service") if s["metadata"]["name"] == "broker-console"]
    assert labels_match(service["spec"]["selector"], labels)
    assert [p["port"] for p in service["spec"]["ports"]] == [5090]
    [policy] = [
        p for p in of_kind(docs, "NetworkPolicy") if p["metadata"]["name"] == "broker-console"
    ]
    assert labels_match(policy["spec"]["podSelector"]["matchLabels"], labels)
    assert all(rule.get("from") for rule in policy["spec"]["ingress"])
    [hpa] = of_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "broker-console"
    }  # fmt: skip
    assert hpa["spec"]["minReplicas"] >= 2
    assert "replicas" not in console["spec"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_readiness_probe_is_http_and_every_listener_has_one(overlay: str) -> None:
    for deployment in of_kind(render(overlay), "Deployment"):
        name = deployment["metadata"]["name"]
        for container in containers(deployment):
            ready = container.get("readinessProbe")
            if ready is None:
                # only beat listens on nothing and serves no metrics port
                assert name == "broker-beat", name
                continue
            assert "httpGet" in ready, name
            path = ready["httpGet"]["path"]
            assert path in {"/readyz", "/healthcheck"}, name
            live = container.get("livenessProbe", {})
            # liveness stays cheap: no readiness page behind it
            assert live.get("httpGet", {}).get("path") != "/readyz", name
