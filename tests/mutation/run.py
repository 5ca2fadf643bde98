"""``make mutation``: mutation testing of the modules that carry the README's invariants.

mutmut (configured in ``setup.cfg``, section ``[mutmut]``) first runs the in-process tests once
and records which tests call which function; each mutant then runs only the tests that reach its
function, stopping at the first failure. This script chooses the functions to mutate, runs mutmut,
and reads its results back: it prints every surviving mutant with its diff and closes with

    mutation_score=<killed/total> killed=N survived=N timeout=N

Mutants listed in ``tests/mutation/equivalent.txt`` (each with its reason) cannot change
behaviour: they are reported as equivalent and left out of the total. A mutant that no selected
test reaches counts as survived. See docs/mutation.md.

    python -m tests.mutation.run [--only PATTERN ...] [--max-children N] [--reuse]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = ROOT / "mutants"
EQUIVALENT = Path(__file__).with_name("equivalent.txt")

#: mutmut's names are ``module.x_function__mutmut_N`` and ``module.xǁClassǁmethod__mutmut_N``
SELECTION = (
    # request status transitions, submit and idempotency (invariants 1 and 2)
    "broker.runtime.requests.transitions.*",
    "broker.runtime.requests.submission.*",
    "broker.runtime.requests.group_commit.*",
    # the outbox and the relay's fence
    "broker.runtime.outbox.rows.*",
    "broker.store.db.x_acquire_lease__mutmut_*",
    "broker.store.db.x_release_lease__mutmut_*",
    "broker.store.db.x_fence__mutmut_*",
    # retries, the bookmark queue and timers, locks
    "broker.runtime.failures.retry.*",
    "broker.runtime.bookmarks.queue.*",
    "broker.adapters.locks.*",
    # client authentication and request-type rules: who a certificate is, what it may submit
    # (not the registry's file cache, webhook and rate-limit entries: other concerns)
    "broker.clients.entries.x_normalize_*",
    "broker.clients.entries.x__normalize_hex__mutmut_*",
    "broker.clients.entries.x_read_request_types_file__mutmut_*",
    "broker.clients.entries.x__client_from_entry__mutmut_*",
    "broker.clients.registry.xǁClientRegistryǁauthenticate__mutmut_*",
    "broker.clients.registry.xǁClientRegistryǁrule_for__mutmut_*",
    "broker.clients.registry.xǁClientRegistryǁrules_for__mutmut_*",
    "broker.clients.registry.x__apply_database__mutmut_*",
    "broker.clients.registry.x__build_view__mutmut_*",
    "broker.ingress.auth.*",
    # the outbound HTTP guard: where a URL may go, every hop re-checked, the size cap
    # (not the client's retries, Retry-After parsing or body decoding)
    "broker.outbound.http_client.xǁOutboundHttpǁsend__mutmut_*",
    "broker.outbound.http_client.xǁOutboundHttpǁ_follow__mutmut_*",
    "broker.outbound.http_client.xǁOutboundHttpǁcheck_url__mutmut_*",
    "broker.outbound.http_client.xǁOutboundHttpǁvet_url__mutmut_*",
    "broker.outbound.http_client.xǁOutboundHttpǁ_open__mutmut_*",
    "broker.outbound.http_client.xǁOutboundHttpǁ_read_body__mutmut_*",
    "broker.outbound.http_client.x__redirected__mutmut_*",
    "broker.outbound.guard.*",
    "broker.outbound.urls.*",
)

#: mutmut's exit codes per mutant, folded into the three figures of the closing line; 37 is a
#: mutant that ``mypy --strict`` (``type_check_command`` in setup.cfg) refuses: it cannot pass
#: ``make lint``, so it never reaches a test
TYPE_CHECKED = 37
KILLED = {1, 3, TYPE_CHECKED}
SURVIVED = {0, 5, 33}
TIMEOUT = {36, 24, -24, 152, 255}


#: mutmut's command line without its second clean run and without the equivalent mutants
LAUNCH = Path(__file__).with_name("launch.py")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make mutation", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--only",
        action="append",
        metavar="PATTERN",
        help="mutate only these mutant-name globs (e.g. 'broker.runtime.failures.retry.*'),"
        " repeatable",
    )
    parser.add_argument(
        "--max-children",
        type=int,
        default=(os.cpu_count() or 2) + 1,
        help="mutants tested at once (default: one more than the CPUs, since a mutant's tests"
        " spend part of their time waiting on the databases)",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep mutants/ from the last run (its test map, and the mutants it killed)",
    )
    args = parser.parse_args(argv)
    selection = tuple(args.only or SELECTION)
    unknown = [p for p in selection if not any(_overlaps(p, s) for s in SELECTION)]
    if unknown:
        parser.error(f"--only {unknown[0]!r} is outside the mutated modules")
    equivalent = read_equivalent(EQUIVALENT)

    if not args.reuse and MUTANTS.exists():
        shutil.rmtree(MUTANTS)
    started = time.monotonic()
    load_before = os.getloadavg()
    # mutmut runs every mutant it is given by name again; with --reuse, a mutant already killed
    # stays killed (mutmut itself forgets the results of a function whose code changed).
    open_names = [n for n, c in read_results(MUTANTS, selection).items() if c not in KILLED]
    names = open_names if args.reuse and open_names else list(selection)
    fresh = not (MUTANTS / "mutmut-stats.json").exists()
    command = [sys.executable, str(LAUNCH), *(["--fresh"] if fresh else []), "run"]
    command += ["--max-children", str(args.max_children)]
    command += names
    # the type checker is ``python -m mypy``: this interpreter's, whatever PATH says
    path = os.environ.get("PATH", "")  # noqa: TID251 - the runner's own process environment
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{path}")  # noqa: TID251
    log = ROOT / "mutants-run.log"
    print(f"mutmut: {len(selection)} selections, {args.max_children} children; log in {log.name}")
    with log.open("w") as out:
        code = subprocess.call(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        sys.stdout.write(log.read_text(errors="replace")[-4000:])
        print(f"mutmut failed (exit {code}); see {log.name}")
        return code
    elapsed = time.monotonic() - started

    results = read_results(MUTANTS, selection)
    stale = sorted(set(equivalent) - set(results))
    killed = sorted(n for n, c in results.items() if c in KILLED and n not in equivalent)
    survived = sorted(n for n, c in results.items() if c in SURVIVED and n not in equivalent)
    timeout = sorted(n for n, c in results.items() if c in TIMEOUT and n not in equivalent)
    other = sorted(
        n
        for n, c in results.items()
        if n not in equivalent and c not in KILLED | SURVIVED | TIMEOUT
    )
    marked = sorted(n for n in results if n in equivalent)

    for name in marked:
        print(f"equivalent {name}: {equivalent[name]}")
    for name in survived + other:
        print(f"\nsurvived {name} (exit {results[name]})")
        sys.stdout.write(diff_of(name))
    if stale and not args.only:
        print(f"\nequivalent.txt names mutants that no longer exist: {', '.join(stale)}")
    by_mypy = sum(1 for n in killed if results[n] == TYPE_CHECKED)
    print(f"\nkilled by the tests {len(killed) - by_mypy}, refused by mypy --strict {by_mypy}")
    total = len(killed) + len(survived) + len(timeout) + len(other)
    score = len(killed) / total if total else 0.0
    load_after = os.getloadavg()
    print(
        f"\nwall time {elapsed:.0f}s, load {load_before[0]:.2f} before, {load_after[0]:.2f} after"
        f", {len(marked)} equivalent left out"
    )
    print(
        f"mutation_score={score:.3f} killed={len(killed)}"
        f" survived={len(survived) + len(other)} timeout={len(timeout)}"
    )
    return 0


def _overlaps(pattern: str, allowed: str) -> bool:
    """Whether a ``--only`` glob stays inside one of the selected globs."""
    return fnmatch.fnmatch(pattern, allowed) or fnmatch.fnmatch(allowed, pattern)


def read_equivalent(path: Path) -> dict[str, str]:
    """``mutant-name  reason`` per line (``#`` starts a comment); every entry needs a reason."""
    entries: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        if not reason.strip():
            raise SystemExit(f"{path.name}:{number}: {name} has no reason")
        entries[name] = reason.strip()
    return entries


def read_results(folder: Path, selection: Iterable[str]) -> dict[str, int | None]:
    """Exit code per selected mutant, from mutmut's ``.meta`` files."""
    patterns = tuple(selection)
    results: dict[str, int | None] = {}
    for meta in sorted(folder.rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        for name, code in data.get("exit_code_by_key", {}).items():
            if any(fnmatch.fnmatch(name, p) for p in patterns):
                results[name] = code
    return results


def diff_of(name: str) -> str:
    mutmut = Path(sys.executable).with_name("mutmut")
    shown = subprocess.run(
        [str(mutmut), "show", name], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return shown.stdout if shown.returncode == 0 else shown.stderr


if __name__ == "__main__":
    raise SystemExit(main())
