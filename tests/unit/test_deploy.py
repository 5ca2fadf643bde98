"""Deployment files: they parse, run the README's process commands, and name only real settings.

Static checks only: no Docker engine, cluster or systemd is needed. Each deployment format states
the commands in its own syntax (compose's ``$$``, Kubernetes' ``$(NAME)``, systemd's ``${NAME}``
and absolute paths); ``normalize`` maps them back to the shell words of ``CANONICAL``.
"""

from __future__ import annotations

import configparser
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from broker.errors import ConfigError
from broker.setting_keys import KEY_BY_ENV
from broker.settings import Settings, is_placeholder
from tests.support.services import ON_CI, PROJECT_ROOT

DEPLOY = PROJECT_ROOT / "deploy"
K8S = DEPLOY / "k8s"
SYSTEMD = DEPLOY / "systemd"

#: The one table of process commands; the README shows exactly these.
CANONICAL: dict[str, str] = {
    "migrate": "broker db upgrade",
    "ingress": "gunicorn -c config/gunicorn.conf.py broker.serving.wsgi:public",
    "internal": "gunicorn -c config/gunicorn_internal.conf.py broker.serving.wsgi:internal",
    "console": "gunicorn -c config/gunicorn_console.conf.py broker.serving.wsgi:console",
    "worker": "celery -A tasks worker --loglevel INFO -E",
    "beat": "celery -A tasks beat --loglevel INFO --schedule /var/lib/broker/celerybeat-schedule",
    "flower": "celery -A tasks flower --port=5555 --basic-auth=$FLOWER_USER:$FLOWER_PASSWORD",
}

#: Options an operator may add after a canonical command (README: dedicated queues, autoscaling).
EXTRA_OPTIONS: dict[str, frozenset[str]] = {
    "worker": frozenset(
        {"-Q", "--queues", "--autoscale", "-c", "--concurrency", "-n", "--hostname"}
    ),
    "flower": frozenset({"--address"}),
}

DRAIN_TIMEOUT = float(KEY_BY_ENV["BROKER_DRAIN_TIMEOUT"].default)


# Helpers -----------------------------------------------------------------------------------------


def normalize(argv: list[str]) -> list[str]:
    """Shell words as the README writes them, from a deployment format's command."""
    words = [str(w) for w in argv]
    if len(words) == 3 and words[0] in {"sh", "/bin/sh"} and words[1] == "-c":
        words = shlex.split(words[2])
        if words and words[0] == "exec":
            words = words[1:]
    words[0] = words[0].rsplit("/", 1)[-1]
    # compose escapes $ as $$; Kubernetes expands $(NAME); systemd ${NAME}
    return [re.sub(r"\$\$|\$\((\w+)\)|\$\{(\w+)\}", _dollar, w) for w in words]


def _dollar(match: re.Match[str]) -> str:
    name = match.group(1) or match.group(2)
    return f"${name}" if name else "$"


def assert_runs(role: str, argv: list[str], where: str) -> None:
    """``argv`` is the canonical command of ``role``, plus only the options operators may add."""
    canonical = shlex.split(CANONICAL[role])
    words = normalize(argv)
    assert words[: len(canonical)] == canonical, f"{where}: {words} is not {canonical}"
    extra = words[len(canonical) :]
    allowed = EXTRA_OPTIONS.get(role, frozenset())
    while extra:
        option = extra.pop(0)
        name = option.split("=", 1)[0]
        assert name in allowed, f"{where}: unexpected extra argument {option!r}"
        if "=" not in option:
            assert extra, f"{where}: option {option} has no value"
            extra.pop(0)


def load_yaml(path: Path) -> list[Any]:
    with path.open(encoding="utf-8") as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc is not None]


def deploy_files() -> Iterator[Path]:
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file():
            yield path


def compose() -> dict[str, Any]:
    [doc] = load_yaml(DEPLOY / "docker-compose.yml")
    assert isinstance(doc, dict)
    return doc


def k8s_objects() -> list[dict[str, Any]]:
    """The base's objects as written (kustomize renders them unchanged but for the component
    patch; tests/unit/test_k8s_render.py checks the rendered overlays) and the trial secrets."""
    paths = [p for p in sorted((K8S / "base").glob("*.yaml")) if p.name != "kustomization.yaml"]
    paths.append(K8S / "overlays" / "trial" / "secrets.yaml")
    return [doc for path in paths for doc in load_yaml(path)]


def k8s_pod_specs() -> dict[str, dict[str, Any]]:
    """The pod spec of every Deployment and Job, keyed by its component label."""
    pods: dict[str, dict[str, Any]] = {}
    for obj in k8s_objects():
        if obj["kind"] in {"Deployment", "Job"}:
            component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
            pods[component] = obj["spec"]["template"]["spec"]
    return pods


def k8s_one(kind: str, name: str) -> dict[str, Any]:
    [obj] = [o for o in k8s_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


class _MultiValues(dict[str, Any]):
    """Keeps every value of a repeated unit-file key (configparser keeps only the last)."""

    def __setitem__(self, key: str, value: Any) -> None:
        if isinstance(value, list) and key in self and isinstance(self[key], list):
            self[key].extend(value)
        else:
            super().__setitem__(key, value)


def read_unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(
        strict=False, interpolation=None, dict_type=_MultiValues, empty_lines_in_values=False
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys keep case
    parser.read(path, encoding="utf-8")
    return parser


def unit_values(unit: configparser.ConfigParser, section: str, key: str) -> list[str]:
    """Every value given for ``key``, split into words (Requires=a b, After=... lists)."""
    return unit.get(section, key, fallback="").split()


def seconds(text: str) -> float:
    """A systemd time span such as ``60``, ``60s``, ``1min 30s``."""
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text):
        total += float(number) * units[unit]
    return total


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined."""
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    result = []
    for line in joined.splitlines():
        if line.strip():
            instruction, _, rest = line.strip().partition(" ")
            result.append((instruction.upper(), rest.strip()))
    return result


# Every file --------------------------------------------------------------------------------------


def test_every_yaml_file_parses() -> None:
    # Given every YAML file under deploy/
    paths = [p for p in deploy_files() if p.suffix in {".yml", ".yaml"}]
    assert len(paths) >= 10
    # Then each one parses into at least one mapping
    for path in paths:
        docs = load_yaml(path)
        assert docs, f"{path} is empty"
        assert all(isinstance(d, dict) for d in docs), path


def test_every_broker_name_in_deploy_files_is_a_setting() -> None:
    # Given every name that looks like a setting in any deployment file
    used: dict[str, set[str]] = {}
    for path in deploy_files():
        for name in re.findall(r"\bBROKER_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace")):
            used.setdefault(name, set()).add(str(path.relative_to(DEPLOY)))
    # Then each is a key of broker.settings (an unknown one would only be warned about and ignored)
    assert "BROKER_DATABASE_URL" in used
    unknown = {name: files for name, files in used.items() if name not in KEY_BY_ENV}
    assert unknown == {}


def _filled(value: str) -> str:
    """A setting with its placeholder secret replaced as an operator would replace it."""
    if not is_placeholder(value) and not (
        "://" in value and is_placeholder(urlsplit(value).password or "")
    ):
        return value
    if "://" in value:
        password = urlsplit(value).password or ""
        return value.replace(f":{password}@", ":Zt5nQ2wE8rT1yU4i@")
    return "q4Yc1mT0v9xJr2sLw8eZpN3aUk6bHdFg7iOyRtEs"


def test_every_settings_set_is_accepted_by_the_settings_module() -> None:
    # Given the settings each deployment format gives the broker
    env_file = (SYSTEMD / "broker.env.example").read_text(encoding="utf-8").splitlines()
    sets = {
        "compose": dict(compose()["x-broker-env"]),
        "k8s": {
            **k8s_one("ConfigMap", "broker-config")["data"],
            **k8s_one("Secret", "broker-credentials")["stringData"],
        },
        "systemd": dict(
            ln.split("=", 1) for ln in env_file if ln.strip() and not ln.startswith("#")
        ),
    }
    for where, values in sets.items():
        # (the shipped placeholders are refused, naming their setting: issue 34; filled in, ...)
        filled = {k: _filled(v) for k, v in values.items()}
        if filled != values:
            with pytest.raises(ConfigError, match="placeholder"):
                Settings.from_env(values)
        # When the settings module reads them (unknown keys warn, and warnings are errors here)
        settings = Settings.from_env(filled)
        # Then every value parses, and the production backends are chosen
        assert settings.distributed is True, where
        assert settings.queue_url.startswith("redis://"), where
        assert settings.lock_url.startswith("redis://"), where


def test_no_image_is_unpinned_or_latest() -> None:
    # Given every image that compose, Kubernetes and the Dockerfile name
    images = [s["image"] for s in compose()["services"].values() if "image" in s]
    for pod in k8s_pod_specs().values():
        images += [c["image"] for c in pod["containers"]]
    # Then each carries an explicit tag that is not `latest` (interpolated defaults included)
    for image in images:
        image = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", image)
        name, _, tag = image.rpartition(":")
        assert name, f"{image} has no tag"
        assert tag, f"{image} has no tag"
        assert "/" not in tag, f"{image} has no tag"
        assert tag != "latest", image


# Dockerfile --------------------------------------------------------------------------------------


def test_dockerfile_runs_as_non_root_with_a_healthcheck() -> None:
    # Given the Dockerfile's instructions
    instructions = dockerfile_instructions()
    users = [args for name, args in instructions if name == "USER"]
    health = [args for name, args in instructions if name == "HEALTHCHECK"]
    # Then the final user is not root
    assert users, "no USER"
    assert users[-1].split(":")[0] not in {"root", "0"}
    # And the health check asks the internal listener's readiness with python's urllib (no curl)
    assert len(health) == 1
    assert "http://127.0.0.1:5080/readyz" in health[0]
    assert "urllib" in health[0]
    assert "curl" not in health[0]


def test_dockerfile_builds_in_stages_from_a_pinned_slim_python() -> None:
    # Given the FROM lines, with ARG defaults declared before the first FROM substituted
    instructions = dockerfile_instructions()
    args: dict[str, str] = {}
    for name, rest in instructions:
        if name == "FROM":
            break
        if name == "ARG" and "=" in rest:
            key, value = rest.split("=", 1)
            args[key] = value
    froms = [rest.split() for name, rest in instructions if name == "FROM"]
    stages = {words[-1] for words in froms if len(words) == 3 and words[1].upper() == "AS"}
    bases = [
        re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], words[0])
        for words in froms
        if words[0] not in stages  # a stage built on an earlier one
    ]
    # Then there is a build stage and a runtime stage, both on Python 3.11 slim, never `latest`
    assert len(bases) >= 2
    for base in bases:
        assert base.startswith("python:3.11-slim"), base
        assert not base.endswith(":latest")


def test_dockerfile_leaves_the_internal_listener_on_loopback() -> None:
    # Given the Dockerfile's instructions
    instructions = dockerfile_instructions()
    env = " ".join(rest for name, rest in instructions if name == "ENV")
    exposed = " ".join(rest for name, rest in instructions if name == "EXPOSE").split()
    # Then the image keeps the default bind (loopback) and does not advertise the port
    assert "BROKER_INTERNAL_BIND" not in env
    assert KEY_BY_ENV["BROKER_INTERNAL_BIND"].default.startswith("127.0.0.1:")
    assert "5080" not in exposed
    assert "5001" in exposed


def test_dockerfile_defaults_to_the_worker_in_app_with_config_and_workflows() -> None:
    # Given the Dockerfile's instructions
    instructions = dockerfile_instructions()
    workdirs = [rest for name, rest in instructions if name == "WORKDIR"]
    copies = [rest.split() for name, rest in instructions if name == "COPY"]
    [cmd] = [rest for name, rest in instructions if name == "CMD"]
    # Then the process runs in /app, which holds the repository's config and workflows
    assert workdirs[-1] == "/app"
    sources = {words[-2] for words in copies}
    assert {"config", "workflows"} <= sources
    # And the default command is the worker
    assert_runs("worker", json.loads(cmd), "Dockerfile CMD")


def test_dockerignore_keeps_everything_the_build_copies() -> None:
    # Given the allowlist ignore file BuildKit reads for deploy/Dockerfile
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    kept = {ln[1:].strip().rstrip("/") for ln in ignore if ln.startswith("!")}
    assert "*" in [ln.strip() for ln in ignore], "expected an allowlist (`*` then `!path`)"
    # Then every path COPY takes from the build context is let through
    for name, rest in dockerfile_instructions():
        words = rest.split()
        if name != "COPY" or any(w.startswith("--from") for w in words):
            continue
        for source in [w for w in words[:-1] if not w.startswith("--")]:
            assert source.rstrip("/") in kept, f"COPY {source} is excluded by the ignore file"


def test_entrypoint_turns_secret_files_into_unset_settings(tmp_path: Path) -> None:
    # Given two secret files, one of them for a setting that the environment already sets
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "BROKER_CALLBACK_SECRET").write_text("from-file\n")
    (secrets / "BROKER_TLS_KEY").write_text("/ignored")
    env = {"PATH": os.environ["PATH"], "SECRETS_DIR": str(secrets), "BROKER_TLS_KEY": "/given"}  # noqa: TID251
    # When the entrypoint runs a command
    out = subprocess.run(
        [
            "sh",
            str(DEPLOY / "docker-entrypoint.sh"),
            "sh",
            "-c",
            "echo $BROKER_CALLBACK_SECRET $BROKER_TLS_KEY",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    # Then the unset setting comes from its file and the set one is kept
    assert out.stdout.split() == ["from-file", "/given"]


# docker compose ----------------------------------------------------------------------------------


def test_compose_services_run_the_canonical_commands() -> None:
    # Given the compose services (merge keys resolved by the YAML loader)
    services = compose()["services"]
    # Then each broker role runs its README command
    for role in CANONICAL:
        assert_runs(role, services[role]["command"], f"compose service {role}")


def test_compose_roles_share_settings_and_wait_for_the_migration() -> None:
    # Given the compose file
    doc = compose()
    services = doc["services"]
    shared = doc["x-broker-env"]
    # Then the shared settings are the production backends
    assert shared["BROKER_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert shared["BROKER_QUEUE_URL"].startswith("redis://")
    assert shared["BROKER_LOCK_URL"].startswith("redis://")
    assert shared["BROKER_DISTRIBUTED"] == "true"
    # And every long-running role has them and starts only after the migration succeeded
    for role in CANONICAL.keys() - {"migrate"}:
        service = services[role]
        assert shared.items() <= service["environment"].items(), role
        assert service["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["migrate"]["restart"] == "no"


def test_compose_backends_are_configured_for_durability() -> None:
    # Given the backing services
    services = compose()["services"]
    postgres, redis = services["postgres"], services["redis"]
    # Then PostgreSQL 16 and Redis 7 keep their data in volumes and report health
    assert postgres["image"].startswith("postgres:16")
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    assert redis["image"].startswith("redis:7")
    assert any(v.endswith(":/data") for v in redis["volumes"])
    # And Redis appends every write to its log and never evicts a message
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert "--maxmemory-policy noeviction" in command


def test_compose_worker_scales_and_beat_stays_single() -> None:
    # Given the worker and beat services
    services = compose()["services"]
    worker, beat = services["worker"], services["beat"]
    # Then nothing pins a worker to one container (`--scale worker=N` works)
    assert "container_name" not in worker
    assert "ports" not in worker
    # And a stopping worker gets longer than the drain timeout
    assert seconds(worker["stop_grace_period"]) > DRAIN_TIMEOUT
    # And beat is never replicated
    assert beat.get("deploy", {}).get("replicas", 1) == 1


def test_compose_publishes_the_listeners_and_keeps_flower_on_loopback() -> None:
    # Given the published ports
    services = compose()["services"]
    # Then the public API is reachable, Flower only from the host, the internal listener not at all
    assert services["ingress"]["ports"] == ["5001:5001"]
    assert "ports" not in services["internal"]
    assert services["flower"]["ports"] == ["127.0.0.1:5555:5555"]
    # And Flower's user is required from the operator's environment, its password is a secret file
    env = services["flower"]["environment"]
    assert env["FLOWER_USER"].startswith("${FLOWER_USER:?")
    assert "FLOWER_PASSWORD" not in env
    assert env["FLOWER_PASSWORD_FILE"] == "/run/secrets/flower_password"
    assert "flower_password" in services["flower"]["secrets"]


def test_compose_passes_certificates_and_callback_secret_as_secrets() -> None:
    # Given the compose file
    doc = compose()
    shared = doc["x-broker-env"]
    ingress = doc["services"]["ingress"]
    # Then the TLS settings point at mounted secrets
    mounted = {s if isinstance(s, str) else s["target"] for s in ingress["secrets"]}
    for key in ("BROKER_TLS_CERT", "BROKER_TLS_KEY", "BROKER_TLS_CLIENT_CA"):
        assert shared[key].startswith("/run/secrets/")
        assert shared[key].removeprefix("/run/secrets/") in mounted
    # And the callback secret arrives as a file named after its setting (the entrypoint reads it)
    assert "BROKER_CALLBACK_SECRET" in mounted
    assert "BROKER_CALLBACK_SECRET" not in shared
    assert set(doc["secrets"]) >= {"tls_cert", "tls_key", "tls_client_ca", "callback_secret"}


def test_compose_keeps_the_internal_listener_and_backends_off_the_public_network() -> None:
    # Given the compose file
    doc = compose()
    services, networks = doc["services"], doc["networks"]
    # Then the backend network is internal (no route out, nothing published)
    assert networks["backend"]["internal"] is True
    assert not networks["edge"].get("internal", False)
    # And only the internal service binds its listener beyond loopback, on the backend alone
    wide = {
        name
        for name, service in services.items()
        if not str(
            (service.get("environment") or {}).get("BROKER_INTERNAL_BIND", "127.0.0.1:5080")
        ).startswith("127.")
    }
    assert wide == {"internal"}
    assert services["internal"]["networks"] == ["backend"]
    assert "BROKER_INTERNAL_BIND" not in doc["x-broker-env"]
    # And the databases and every role but the public listener, Flower and the workers' outbound
    # calls stay on the backend
    on_edge = {name for name, s in services.items() if "edge" in s.get("networks", [])}
    assert on_edge == {"ingress", "worker", "flower"}
    for name, service in services.items():
        assert service.get("networks"), f"{name} would join the default network"
    # And no port but the public listener's is published beyond the host's loopback
    for name, service in services.items():
        for port in service.get("ports", []):
            assert port == "5001:5001" or port.startswith("127.0.0.1:"), (name, port)
            assert not port.endswith(":5080"), name


def compose_command() -> list[str] | None:
    """Docker Compose v2: the docker client's plugin, else the standalone binary (the dev extra
    installs it into the venv); None when neither is there."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, text=True, timeout=60, check=False
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    # The package's console script drops the binary's exit code, so run the binary itself.
    spec = importlib.util.find_spec("compose")
    shipped = Path(spec.origin).with_name("docker-compose") if spec and spec.origin else None
    standalone = str(shipped) if shipped and shipped.exists() else shutil.which("docker-compose")
    if standalone is None:
        return None
    probe = subprocess.run(
        [standalone, "version"], capture_output=True, text=True, timeout=60, check=False
    )
    return [standalone] if probe.returncode == 0 and "v2." in probe.stdout else None


def test_docker_compose_config_accepts_the_file(tmp_path: Path) -> None:
    # Given Docker Compose v2 (`config` renders and validates; it needs no engine)
    compose_cli = compose_command()
    if compose_cli is None:
        message = "Docker Compose v2 is not installed (make install-dev installs it)"
        if ON_CI:
            pytest.fail(f"{message}; CI=true: the compose file must be validated")
        pytest.skip(message)
    env_file = tmp_path / "compose.env"
    env_file.write_text("POSTGRES_PASSWORD=pw\nFLOWER_USER=admin\nFLOWER_PASSWORD=pw\n")
    # When compose renders the file
    compose_file = str(DEPLOY / "docker-compose.yml")
    result = subprocess.run(
        [*compose_cli, "--env-file", str(env_file), "-f", compose_file, "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")},  # noqa: TID251
    )
    # Then it accepts it
    assert result.returncode == 0, result.stderr


def test_docker_compose_config_refuses_a_broken_file(tmp_path: Path) -> None:
    # Given a copy of the compose file with a service key compose does not know
    compose_cli = compose_command()
    if compose_cli is None:
        if ON_CI:
            pytest.fail("Docker Compose v2 is not installed; CI=true: the check must run")
        pytest.skip("Docker Compose v2 is not installed")
    broken = tmp_path / "docker-compose.yml"
    text = (DEPLOY / "docker-compose.yml").read_text()
    broken.write_text(text.replace("services:\n", "services:\n  bogus:\n    imagez: nope\n", 1))
    env_file = tmp_path / "compose.env"
    env_file.write_text("POSTGRES_PASSWORD=pw\nFLOWER_USER=admin\nFLOWER_PASSWORD=pw\n")
    # When compose renders it, then it refuses it (the check above can fail)
    result = subprocess.run(
        [*compose_cli, "--env-file", str(env_file), "-f", str(broken), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=DEPLOY,
        env={k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")},  # noqa: TID251
    )
    assert result.returncode != 0
    assert "imagez" in result.stderr


# Kubernetes --------------------------------------------------------------------------------------


def test_kubernetes_containers_run_the_canonical_commands() -> None:
    # Given the pod spec of every Deployment and the migration Job
    pods = k8s_pod_specs()
    assert set(pods) == set(CANONICAL)
    # Then each container runs its role's README command
    for role, pod in pods.items():
        [container] = pod["containers"]
        argv = container.get("command", []) + container.get("args", [])
        assert_runs(role, argv, f"k8s {role}")


def test_kubernetes_pods_run_non_root_with_resource_bounds() -> None:
    for role, pod in k8s_pod_specs().items():
        # Given a pod of any role
        security = pod["securityContext"]
        # Then it runs as a non-root user and each container is bounded and unprivileged
        assert security["runAsNonRoot"] is True, role
        assert security["runAsUser"] != 0, role
        for container in pod["containers"]:
            assert {"cpu", "memory"} <= container["resources"]["requests"].keys(), role
            assert {"cpu", "memory"} <= container["resources"]["limits"].keys(), role
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, role
            assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], role


def test_kubernetes_internal_listener_is_probed_on_health_and_readiness() -> None:
    # Given the internal listener's container
    [container] = k8s_pod_specs()["internal"]["containers"]
    port = {p["name"]: p["containerPort"] for p in container["ports"]}
    # Then liveness asks /healthz and readiness /readyz, both on :5080
    live, ready = container["livenessProbe"]["httpGet"], container["readinessProbe"]["httpGet"]
    assert live["path"] == "/healthz"
    assert ready["path"] == "/readyz"
    assert port[live["port"]] == port[ready["port"]] == 5080


def test_kubernetes_workers_drain_and_autoscale_while_beat_stays_single() -> None:
    # Given the worker and beat Deployments and the worker pool's ScaledObject
    pods = k8s_pod_specs()
    beat = k8s_one("Deployment", "broker-beat")
    scaled = k8s_one("ScaledObject", "broker-worker")
    # Then a stopping worker gets longer than the drain timeout
    assert pods["worker"]["terminationGracePeriodSeconds"] > DRAIN_TIMEOUT
    # And beat has one replica, replaced by stopping the old one first
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"
    # And the general pool scales on its queue's length and the outbox backlog, never to zero
    assert scaled["spec"]["scaleTargetRef"]["name"] == "broker-worker"
    assert scaled["spec"]["minReplicaCount"] >= 1
    kinds = {t["type"]: t["metadata"] for t in scaled["spec"]["triggers"]}
    assert kinds["redis"]["listName"] == "broker.default"
    assert "broker_outbox_pending" in kinds["prometheus"]["query"]
    # And no HorizontalPodAutoscaler competes with the one KEDA owns (the console has its own)
    autoscaled = [
        o["spec"]["scaleTargetRef"]["name"]
        for o in k8s_objects()
        if o["kind"] == "HorizontalPodAutoscaler"
    ]
    assert autoscaled == ["broker-console"]
    assert "replicas" not in k8s_one("Deployment", "broker-worker")["spec"]


def test_kubernetes_services_expose_each_listener() -> None:
    # Given the Services and the Deployments they select
    services = [o for o in k8s_objects() if o["kind"] == "Service"]
    ports = {s["metadata"]["name"]: [p["port"] for p in s["spec"]["ports"]] for s in services}
    # Then the public, internal and Flower ports are served, and the metrics ports headless
    assert ports == {
        "broker-public": [5001],
        "broker-internal": [5080],
        "broker-console": [5090],
        "broker-flower": [5555],
        "broker-ingress-metrics": [9808],
        "broker-worker-metrics": [9808],
    }
    components = set(k8s_pod_specs())
    for service in services:
        assert service["spec"]["selector"]["app.kubernetes.io/component"] in components


def test_kubernetes_binds_the_internal_listener_wide_in_its_own_pods_only() -> None:
    # Given the shared ConfigMap and every pod
    config = k8s_one("ConfigMap", "broker-config")["data"]
    binds = {
        role: {e["name"]: e.get("value") for e in container.get("env", [])}.get(
            "BROKER_INTERNAL_BIND"
        )
        for role, pod in k8s_pod_specs().items()
        for container in pod["containers"]
    }
    # Then only the internal pods listen beyond loopback, behind a ClusterIP Service
    assert "BROKER_INTERNAL_BIND" not in config
    assert {role: bind for role, bind in binds.items() if bind} == {"internal": "0.0.0.0:5080"}
    assert k8s_one("Service", "broker-internal")["spec"]["type"] == "ClusterIP"


def test_kubernetes_network_policy_admits_the_internal_port_only_from_named_pods() -> None:
    # Given the NetworkPolicy that selects the internal listener's pods
    internal_labels = k8s_one("Deployment", "broker-internal")["spec"]["template"]["metadata"][
        "labels"
    ]
    policies = [
        o
        for o in k8s_objects()
        if o["kind"] == "NetworkPolicy"
        and o["spec"]["podSelector"].get("matchLabels", {}).items() <= internal_labels.items()
        and "matchExpressions" not in o["spec"]["podSelector"]
    ]
    [policy] = policies
    spec = policy["spec"]
    assert policy["metadata"]["namespace"] == "broker"
    assert "Ingress" in spec["policyTypes"]
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "internal"
    # Then every rule names its sources (a rule without `from` would admit anyone) and the port
    peers: list[dict[str, Any]] = []
    for rule in spec["ingress"]:
        assert rule.get("from"), "a rule without sources admits every pod and address"
        assert rule["ports"] == [{"protocol": "TCP", "port": 5080}]
        peers += rule["from"]
    for peer in peers:
        assert "ipBlock" not in peer, peer
        assert peer.get("podSelector", {}).get("matchLabels"), f"{peer} admits whole namespaces"
    # And the sources are the broker's own pods and Prometheus
    own = [p for p in peers if "namespaceSelector" not in p]
    assert [p["podSelector"]["matchLabels"] for p in own] == [
        {"app.kubernetes.io/name": "elsa-celery-broker"}
    ]
    prometheus = [
        p
        for p in peers
        if p["podSelector"]["matchLabels"].get("app.kubernetes.io/name") == "prometheus"
    ]
    assert len(prometheus) == 1
    assert prometheus[0]["namespaceSelector"]["matchLabels"]


def test_kubernetes_background_pods_admit_only_prometheus_on_the_worker_metrics_port() -> None:
    policy = k8s_one("NetworkPolicy", "broker-background")
    [expression] = policy["spec"]["podSelector"]["matchExpressions"]
    assert set(expression["values"]) == {"worker", "beat", "migrate"}
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9808}]
    [peer] = rule["from"]
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}


def test_kubernetes_references_name_existing_configmaps_and_secrets() -> None:
    # Given the ConfigMaps and Secrets the manifests define
    objects = k8s_objects()
    defined = {(o["kind"], o["metadata"]["name"]) for o in objects}
    # Then every envFrom and volume of every pod refers to one of them
    for role, pod in k8s_pod_specs().items():
        for container in pod["containers"]:
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert ("ConfigMap", source["configMapRef"]["name"]) in defined, role
                if "secretRef" in source:
                    assert ("Secret", source["secretRef"]["name"]) in defined, role
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                assert ("Secret", volume["secret"]["secretName"]) in defined, role
    # And the TLS settings point into the mounted certificate Secret
    config = k8s_one("ConfigMap", "broker-config")["data"]
    tls = k8s_one("Secret", "broker-tls")["stringData"]
    for key in ("BROKER_TLS_CERT", "BROKER_TLS_KEY", "BROKER_TLS_CLIENT_CA"):
        folder, _, name = config[key].rpartition("/")
        assert folder == "/etc/broker/tls", key
        assert name in tls, key


# systemd -----------------------------------------------------------------------------------------

UNIT_ROLES = {
    "broker-migrate.service": "migrate",
    "broker-ingress.service": "ingress",
    "broker-internal.service": "internal",
    "broker-console.service": "console",
    "broker-worker.service": "worker",
    "broker-worker@.service": "worker",
    "broker-beat.service": "beat",
    "broker-flower.service": "flower",
}


@pytest.mark.parametrize("name", sorted(UNIT_ROLES))
def test_systemd_unit_runs_its_role_hardened(name: str) -> None:
    # Given one unit file
    unit = read_unit(SYSTEMD / name)
    service = unit["Service"]
    # Then it runs the role's command as a dedicated user with the shared settings file
    assert_runs(UNIT_ROLES[name], shlex.split(service["ExecStart"]), name)
    assert service["User"] not in {"", "root"}
    assert "/etc/broker/broker.env" in unit_values(unit, "Service", "EnvironmentFile")
    # And it restarts on failure and stops with SIGTERM, leaving time to drain
    assert service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM"
    assert seconds(service["TimeoutStopSec"]) > DRAIN_TIMEOUT
    # And it may write nothing but the var folder
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert service["PrivateTmp"] == "yes"
    assert "/var/lib/broker" in unit_values(unit, "Service", "ReadWritePaths")
    # And every role but the migration starts only after the migration succeeded
    if UNIT_ROLES[name] == "migrate":
        assert service["Type"] == "oneshot"
    else:
        assert "broker-migrate.service" in unit_values(unit, "Unit", "Requires")
        assert "broker-migrate.service" in unit_values(unit, "Unit", "After")


def test_systemd_worker_template_takes_its_queues_from_the_instance_name() -> None:
    # Given the worker template
    service = read_unit(SYSTEMD / "broker-worker@.service")["Service"]
    argv = shlex.split(service["ExecStart"])
    # Then the instance name (unescaped) is the queue list, and each instance has its own node name
    assert argv[argv.index("-Q") + 1] == "%I"
    assert any(w.startswith("--hostname=%i@") for w in argv)


def test_systemd_units_are_all_checked() -> None:
    # Given the unit files shipped
    shipped = {p.name for p in SYSTEMD.glob("*.service")}
    # Then each one has a role above (a new unit needs its checks)
    assert shipped == set(UNIT_ROLES)


# Procfile and README -----------------------------------------------------------------------------

PROCFILE_ROLES = {
    "release": "migrate",
    "web": "ingress",
    "internal": "internal",
    "console": "console",
    "worker": "worker",
    "beat": "beat",
}


def test_procfile_runs_the_canonical_commands() -> None:
    # Given the Procfile's process types
    lines = (DEPLOY / "Procfile").read_text(encoding="utf-8").splitlines()
    entries = dict(ln.split(":", 1) for ln in lines if ln.strip() and not ln.startswith("#"))
    # Then each runs exactly its role's README command, after its environment assignments
    assert set(entries) == set(PROCFILE_ROLES)
    for name, role in PROCFILE_ROLES.items():
        command = re.sub(r"^(?:[A-Z_]+=\S+ )*", "", entries[name].strip())
        assert command == CANONICAL[role], name
    # And the worker remaps SIGTERM to drain
    assert entries["worker"].strip().startswith(f"{REMAP} ")


def test_procfile_web_listens_on_the_platforms_port() -> None:
    # Given the web process type, as the platform's shell runs it with PORT set
    lines = (DEPLOY / "Procfile").read_text(encoding="utf-8").splitlines()
    web = next(ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("web:"))
    assignments = web[: web.index("gunicorn")]
    env = {"PATH": os.environ["PATH"], "PORT": "43210"}  # noqa: TID251
    out = subprocess.run(
        ["sh", "-c", f"{assignments} printenv BROKER_PUBLIC_BIND"],
        env=env,
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    # Then the public listener binds that port on every interface
    assert out.stdout.strip() == "0.0.0.0:43210"


#: what makes a worker's SIGTERM a drain (Celery's soft shutdown) instead of a warm shutdown
REMAP = "REMAP_SIGTERM=SIGQUIT"


def test_every_worker_form_remaps_sigterm_to_drain() -> None:
    # Given each deploy form's worker
    services = compose()["services"]
    [container] = k8s_pod_specs()["worker"]["containers"]
    # Then each sets REMAP_SIGTERM=SIGQUIT (the drain needs Celery's soft shutdown)
    assert services["worker"]["environment"]["REMAP_SIGTERM"] == "SIGQUIT"
    assert {"name": "REMAP_SIGTERM", "value": "SIGQUIT"} in container["env"]
    for unit in ("broker-worker.service", "broker-worker@.service"):
        assert REMAP in read_unit(SYSTEMD / unit).get("Service", "Environment").split(), unit
    # And no other role has it (gunicorn and beat have their own stop signals)
    for name, service in services.items():
        if name != "worker":
            assert "REMAP_SIGTERM" not in (service.get("environment") or {}), name


def test_readme_shows_every_canonical_command_verbatim() -> None:
    # Given the project README
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    # Then it gives each process command exactly as the deployment files run it
    missing = [role for role, command in CANONICAL.items() if command not in readme]
    assert missing == []


# Metrics in every form ---------------------------------------------------------------------------

#: the roles whose processes count, and the setting that opens their metrics port (the internal
#: listener serves /metrics on its own port)
METRICS_BINDS = {"ingress": "BROKER_INGRESS_METRICS_BIND", "worker": "BROKER_WORKER_METRICS_BIND"}


def test_entrypoint_empties_the_multiprocess_folder_before_the_command(tmp_path: Path) -> None:
    # Given a multiprocess folder holding a dead process's files
    folder = tmp_path / "prometheus"
    folder.mkdir()
    (folder / "counter_123.db").write_bytes(b"stale")
    env = {
        "PATH": os.environ["PATH"],  # noqa: TID251
        "SECRETS_DIR": str(tmp_path),
        "PROMETHEUS_MULTIPROC_DIR": str(folder),
    }
    # When the entrypoint runs a command
    out = subprocess.run(
        ["sh", str(DEPLOY / "docker-entrypoint.sh"), "ls", "-A", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    # Then the command finds the folder empty
    assert out.stdout == ""
    assert folder.is_dir()


def test_compose_roles_count_into_their_own_folder_and_open_a_metrics_port() -> None:
    services = compose()["services"]
    for role in ("ingress", "internal", "worker"):
        env = services[role]["environment"]
        # Then every counting role has a multiprocess folder (per container: not a volume)
        folder = env["PROMETHEUS_MULTIPROC_DIR"]
        mounts = [str(v).split(":")[1] for v in services[role].get("volumes", [])]
        assert not any(folder.startswith(m) for m in mounts), role
    for role, setting in METRICS_BINDS.items():
        # And the ingress and workers serve /metrics on a port that is not published
        env = services[role]["environment"]
        assert env[setting].endswith(":9808"), role
        assert not any("9808" in str(p) for p in services[role].get("ports", [])), role


def test_kubernetes_pods_serve_metrics_that_prometheus_finds() -> None:
    pods = {
        role: k8s_one("Deployment", f"broker-{role}")["spec"]["template"]
        for role in ("ingress", "worker", "internal")
    }
    config = k8s_one("ConfigMap", "broker-config")["data"]
    # Then the multiprocess folder is on each pod's own emptyDir
    assert config["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/")
    for role, template in pods.items():
        spec = template["spec"]
        [container] = spec["containers"]
        tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
        assert tmp, role
        [volume] = [v for v in spec["volumes"] if v["name"] == tmp[0]["name"]]
        assert "emptyDir" in volume, role
        # And the pod is annotated for scraping, on a port it declares
        notes = template["metadata"]["annotations"]
        assert notes["prometheus.io/scrape"] == "true", role
        declared = {p["containerPort"] for p in container["ports"]}
        assert int(notes["prometheus.io/port"]) in declared, role
    for role, setting in METRICS_BINDS.items():
        [container] = pods[role]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env[setting] == "0.0.0.0:9808", role
        assert {"name": "metrics", "containerPort": 9808} in container["ports"], role
    # And a ServiceMonitor scrapes the metrics ports and the internal port of labelled Services
    monitor = k8s_one("ServiceMonitor", "elsa-celery-broker")
    selector = monitor["spec"]["selector"]["matchLabels"]
    labelled = [
        o
        for o in k8s_objects()
        if o["kind"] == "Service" and selector.items() <= o["metadata"]["labels"].items()
    ]
    names = {p["name"] for s in labelled for p in s["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == names == {"metrics", "internal"}
    assert all(s["spec"]["type"] == "ClusterIP" for s in labelled)


def test_kubernetes_ingress_pods_admit_the_world_on_the_api_and_only_prometheus_on_metrics() -> (
    None
):
    policy = k8s_one("NetworkPolicy", "broker-ingress")
    public, metrics_rule = policy["spec"]["ingress"]
    assert public == {"ports": [{"protocol": "TCP", "port": 5001}]}
    assert metrics_rule["ports"] == [{"protocol": "TCP", "port": 9808}]
    [peer] = metrics_rule["from"]
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}


@pytest.mark.parametrize(
    "name", ["broker-ingress.service", "broker-internal.service", "broker-worker.service",
             "broker-worker@.service"]
)  # fmt: skip
def test_systemd_counting_units_have_a_fresh_folder_of_their_own(name: str) -> None:
    # Given a unit whose processes count
    unit = read_unit(SYSTEMD / name)
    env = dict(v.split("=", 1) for v in unit_values(unit, "Service", "Environment"))
    runtime = unit["Service"]["RuntimeDirectory"]
    # Then its multiprocess folder is its own RuntimeDirectory (empty at each start)
    assert env["PROMETHEUS_MULTIPROC_DIR"] == f"%t/{runtime}"
    assert runtime.startswith(name.split(".")[0].replace("@", "-"))


def test_systemd_ingress_and_worker_serve_metrics_on_distinct_ports() -> None:
    ports = {}
    for name, setting in (
        ("broker-ingress.service", "BROKER_INGRESS_METRICS_BIND"),
        ("broker-worker.service", "BROKER_WORKER_METRICS_BIND"),
    ):
        unit = read_unit(SYSTEMD / name)
        env = dict(v.split("=", 1) for v in unit_values(unit, "Service", "Environment"))
        ports[name] = env[setting]
    assert len(set(ports.values())) == 2, ports


def test_compose_worker_health_reads_the_heartbeat_file_without_python(tmp_path: Path) -> None:
    # Given the worker's healthcheck and heartbeat file
    worker = compose()["services"]["worker"]
    path = worker["environment"]["BROKER_WORKER_HEARTBEAT_FILE"]
    kind, script = worker["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    assert "python" not in script
    assert "celery" not in script
    local = script.replace("$$", "$").replace(path, str(tmp_path / "alive"))
    # Then it fails without the file and passes once the worker touched it
    assert subprocess.run(["sh", "-c", local], timeout=10, check=False).returncode != 0
    (tmp_path / "alive").touch()
    assert subprocess.run(["sh", "-c", local], timeout=10, check=False).returncode == 0


# The console and the probes in every form ---------------------------------------------------------


def test_compose_hands_the_console_no_callback_secret() -> None:
    # Given the console service (issue 34): it neither mints callback tokens nor checks callbacks
    console = compose()["services"]["console"]
    targets = {
        s if isinstance(s, str) else s.get("target", s["source"]) for s in console["secrets"]
    }
    # Then no callback secret reaches it, by file or by variable
    assert "BROKER_CALLBACK_SECRET" not in targets
    assert "callback_secret" not in {
        s if isinstance(s, str) else s["source"] for s in console["secrets"]
    }
    assert "BROKER_CALLBACK_SECRET" not in console["environment"]


def test_compose_passes_no_password_in_a_plain_variable() -> None:
    # Given every service of the compose file
    doc = compose()
    for name, service in doc["services"].items():
        env = service.get("environment") or {}
        # Then no variable holds a password (nor interpolates one from deploy/.env)
        for key, value in env.items():
            assert "PASSWORD" not in key or key.endswith("_FILE"), f"{name}: {key}"
            assert "PASSWORD}" not in str(value), f"{name}: {key}"
        url = env.get("BROKER_DATABASE_URL")
        if url:
            assert urlsplit(url).password is None, f"{name}: the database URL holds a password"
    # And PostgreSQL and every broker role read the one password file
    assert doc["services"]["postgres"]["environment"]["POSTGRES_PASSWORD_FILE"] == (
        "/run/secrets/postgres_password"
    )
    assert doc["x-broker-env"]["PGPASSWORD_FILE"] == "/run/secrets/postgres_password"
    for role in CANONICAL:
        sources = {
            s if isinstance(s, str) else s["source"] for s in doc["services"][role]["secrets"]
        }
        assert "postgres_password" in sources, role
    assert doc["secrets"]["postgres_password"] == {"file": "./secrets/postgres-password"}


def test_entrypoint_reads_file_variables_but_leaves_the_brokers_own_file_settings(
    tmp_path: Path,
) -> None:
    # Given PGPASSWORD_FILE naming a secret file, and a broker setting that is a file path
    secret = tmp_path / "postgres_password"
    secret.write_text("s3cret-from-file\n")
    env = {
        "PATH": os.environ["PATH"],  # noqa: TID251
        "SECRETS_DIR": str(tmp_path / "none"),
        "PGPASSWORD_FILE": str(secret),
        "BROKER_CLIENTS_FILE": "/app/config/clients.json",
    }
    # When the entrypoint runs a command
    out = subprocess.run(
        [
            "sh",
            str(DEPLOY / "docker-entrypoint.sh"),
            "sh",
            "-c",
            'echo "$PGPASSWORD|${PGPASSWORD_FILE:-unset}|"'
            '"$BROKER_CLIENTS_FILE|${BROKER_CLIENTS:-unset}"',
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    # Then the password is in the process's environment only, and the setting is untouched
    assert out.stdout.strip() == "s3cret-from-file|unset|/app/config/clients.json|unset"


def test_compose_runs_the_console_on_its_own_network_with_the_shared_secret() -> None:
    doc = compose()
    console = doc["services"]["console"]
    # Then it runs the console's command on the backend and a network of its own
    assert_runs("console", console["command"], "compose service console")
    assert console["networks"] == ["backend", "console"]
    assert "console" in doc["networks"]
    only_console = {n for n, s in doc["services"].items() if "console" in s.get("networks", [])}
    assert only_console == {"console"}
    assert console["environment"]["BROKER_CONSOLE_BIND"] == "0.0.0.0:5090"
    assert console["ports"] == ["127.0.0.1:5090:5090"]
    # And its signing key comes from a secret file (the same for every replica)
    targets = {s["target"] for s in console["secrets"] if isinstance(s, dict)}
    assert "BROKER_CONSOLE_SECRET" in targets
    assert "console_secret" in doc["secrets"]
    assert "BROKER_CONSOLE_SECRET" not in doc["x-broker-env"]


def test_compose_listeners_report_readiness_over_http() -> None:
    services = compose()["services"]
    expected = {
        "ingress": "http://127.0.0.1:9808/readyz",
        "internal": "http://127.0.0.1:5080/readyz",
        "console": "http://127.0.0.1:5090/readyz",
        "flower": "http://127.0.0.1:5555/healthcheck",
    }
    for name, url in expected.items():
        test = " ".join(services[name]["healthcheck"]["test"])
        assert url in test, name
    # The ingress's readiness port is the metrics port it opens
    assert services["ingress"]["environment"]["BROKER_INGRESS_METRICS_BIND"].endswith(":9808")


def test_dockerfile_bakes_the_console_assets_in_with_their_integrity_checked() -> None:
    instructions = dockerfile_instructions()
    runs = " ".join(rest for name, rest in instructions if name == "RUN")
    # Then a build stage installs them with the broker's own integrity-checked command
    assert "broker console assets" in runs
    assert "--check" in runs
    # And the runtime stage copies the result and points the setting at it
    copies = [rest for name, rest in instructions if name == "COPY" and "--from=assets" in rest]
    [copy] = copies
    target = copy.split()[-1]
    env = " ".join(rest for name, rest in instructions if name == "ENV")
    assert f"BROKER_CONSOLE_ASSETS_DIR={target}" in env
    # And npm exists only in the assets stage, never in the image that runs
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    runtime = text[text.index("AS runtime") :].splitlines()
    assert not [ln for ln in runtime if "npm" in ln and not ln.lstrip().startswith("#")]


def test_the_console_fetches_nothing_when_it_starts() -> None:
    # The console's modules never run npm: only the `assets` command (make install, the image's
    # build) does.
    for module in ("console/app.py", "console/studio.py", "serving/wsgi.py", "console/pages.py"):
        text = (PROJECT_ROOT / "broker" / module).read_text(encoding="utf-8")
        assert not re.search(r"assets\.install\(", text), module
        assert "subprocess" not in text, module
