"""The lock files: every dependency of pyproject.toml pinned, within its range, with hashes, and
used by every install (the Makefile, the Dockerfile). After a dependency changes in
pyproject.toml, `make lock` regenerates them; these tests fail until it has."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.support.services import PROJECT_ROOT

LOCKS = {
    "runtime": (PROJECT_ROOT / "requirements" / "runtime.txt", ("postgres", "flower")),
    "dev": (PROJECT_ROOT / "requirements" / "dev.txt", ("postgres", "flower", "bench", "dev")),
}
PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s\\;]+)")


def project() -> dict[str, object]:
    with (PROJECT_ROOT / "pyproject.toml").open("rb") as fh:
        return dict(tomllib.load(fh)["project"])


def pins(lock: str) -> dict[str, tuple[Version, int]]:
    """name -> (version, number of hashes) of a pip-compile lock."""
    text = LOCKS[lock][0].read_text(encoding="utf-8")
    found: dict[str, tuple[Version, int]] = {}
    for block in re.split(r"\n(?=\S)", text):
        match = PIN.match(block)
        if match:
            name = canonicalize_name(match.group(1))
            found[name] = (Version(match.group(2)), block.count("--hash=sha256:"))
    return found


def required(extras: tuple[str, ...]) -> list[Requirement]:
    meta = project()
    lines = list(meta["dependencies"])  # type: ignore[call-overload]
    optional = meta["optional-dependencies"]
    for extra in extras:
        lines += optional[extra]  # type: ignore[index]
    env = default_environment()
    return [r for r in map(Requirement, lines) if r.marker is None or r.marker.evaluate(env)]


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_dependency_is_pinned_within_its_range_with_hashes(lock: str) -> None:
    locked = pins(lock)
    for requirement in required(LOCKS[lock][1]):
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in {lock}: run `make lock`"
        version, hashes = locked[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{name}=={version} is outside {requirement.specifier}: run `make lock`"
        )
        assert hashes >= 1, name
    # And every pin, transitive ones too, carries a hash (pip --require-hashes needs them all)
    assert all(hashes for _, hashes in locked.values())


def test_the_dev_lock_pins_the_runtime_set_identically() -> None:
    runtime, dev = pins("runtime"), pins("dev")
    assert {n: v for n, (v, _) in runtime.items()} == {n: dev[n][0] for n in runtime}


def test_the_bounds_the_code_needs_are_declared() -> None:
    by_name = {canonicalize_name(r.name): r for r in required(())}
    assert by_name["celery"].specifier.contains("5.5.0")
    assert not by_name["celery"].specifier.contains("5.4.9")
    assert not by_name["gunicorn"].specifier.contains("25.0.9")
    assert "urllib3" in by_name
    optional = project()["optional-dependencies"]
    assert {"postgres", "flower", "bench", "dev"} <= set(optional)  # type: ignore[arg-type]


def test_installs_go_through_the_locks() -> None:
    makefile = (PROJECT_ROOT / "Makefile").read_text(encoding="utf-8")
    assert "--require-hashes -r $(LOCK)" in makefile
    assert "--require-hashes -r $(DEV_LOCK)" in makefile
    assert makefile.count("--no-deps -e .") == 2
    assert "pip-compile" in makefile
    dockerfile = (PROJECT_ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    assert "--require-hashes --wheel-dir /wheels -r requirements/runtime.txt" in dockerfile
    assert "--no-index --no-deps /wheels/*.whl" in dockerfile
