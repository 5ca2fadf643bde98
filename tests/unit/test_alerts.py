"""The alert rules (deploy/alerts/): a plain Prometheus rules file and a PrometheusRule holding the
same groups, both accepted by ``promtool check rules``, the unit tests of
``broker-rules.test.yml`` passing under ``promtool test rules`` (and failing when a rule changes),
every required alert present, and every metric they read one the broker exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.services import ON_CI, PROJECT_ROOT

ALERTS = PROJECT_ROOT / "deploy" / "alerts"
RULES = ALERTS / "broker-rules.yml"
RULE_TESTS = ALERTS / "broker-rules.test.yml"
PROMETHEUS_RULE = PROJECT_ROOT / "deploy" / "k8s" / "base" / "alerts.yaml"

#: what operators must be told about (issue: backlog age, dead letters growing, relay lag, beat
#: silent, worker heartbeats missing, webhook endpoints disabled)
REQUIRED = {
    "BrokerBacklogOld",
    "BrokerDeadLettersGrowing",
    "BrokerRelayLagging",
    "BrokerBeatSilent",
    "BrokerWorkerHeartbeatMissing",
    "BrokerWebhookEndpointsDisabled",
}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed (make test installs Debian's prometheus package)"
        if ON_CI:
            pytest.fail(f"{message}; CI=true: the alert rules must be checked")
        pytest.skip(message)
    return found


def run(*args: str, cwd: Path = ALERTS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def rules_of(groups: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in groups["groups"] for rule in group["rules"]]


def test_the_rules_file_passes_promtool_check() -> None:
    result = run("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_prometheus_rule_holds_the_same_groups_and_passes_promtool_check(
    tmp_path: Path,
) -> None:
    # Given the PrometheusRule the Kubernetes base applies
    rule = load(PROMETHEUS_RULE)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["kind"] == "PrometheusRule"
    assert rule["metadata"]["namespace"] == "broker"
    # Then its groups are the plain file's, and promtool accepts them as a rules file
    assert rule["spec"] == load(RULES)
    extracted = tmp_path / "prometheus-rule.yml"
    extracted.write_text(yaml.safe_dump(rule["spec"]), encoding="utf-8")
    result = run("check", "rules", str(extracted))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_kustomize_base_applies_the_prometheus_rule() -> None:
    kustomization = load(PROJECT_ROOT / "deploy" / "k8s" / "base" / "kustomization.yaml")
    assert PROMETHEUS_RULE.name in kustomization["resources"]


def test_the_alert_unit_tests_pass() -> None:
    result = run("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    # and they cover at least two alerts
    tested = {
        case["alertname"]
        for test in load(RULE_TESTS)["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert len(tested) >= 2
    assert tested <= REQUIRED


def test_the_alert_unit_tests_fail_when_a_rule_changes(tmp_path: Path) -> None:
    # Given copies where the relay-lag threshold is ten times higher
    text = RULES.read_text(encoding="utf-8")
    rule = "max(broker_outbox_oldest_pending_age_seconds) > 120"
    changed = text.replace(rule, rule + "0")
    assert changed != text
    (tmp_path / RULES.name).write_text(changed, encoding="utf-8")
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    # When promtool runs the unit tests on them, then they fail
    result = run("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert result.returncode != 0
    assert "BrokerRelayLagging" in result.stdout + result.stderr


def test_every_required_alert_is_there_with_a_severity_and_a_summary() -> None:
    rules = {rule["alert"]: rule for rule in rules_of(load(RULES)) if "alert" in rule}
    assert set(rules) >= REQUIRED
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"], name


def exported_metrics() -> set[str]:
    """Every metric name the broker's code declares (Counter, Gauge, Histogram, gauge families)."""
    names: set[str] = set()
    for path in (PROJECT_ROOT / "broker").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r'"(broker_[a-z_]+)"', text))
    return names


def test_every_metric_an_alert_reads_is_one_the_broker_exports() -> None:
    exported = exported_metrics()
    for rule in rules_of(load(RULES)):
        for name in re.findall(r"\bbroker_[a-z_]+", rule["expr"]):
            # counters are exposed with _total, histograms with _bucket/_sum/_count
            base = re.sub(r"_(total|bucket|sum|count)$", "", name)
            assert base in exported, f"{rule['alert']} reads {name}, which nothing exports"
