"""Test hosts in Linux network namespaces: each its own stack and address, joined by a bridge.

``Network`` makes ``ip netns`` namespaces named after the test run, one veth pair per host (the
host's end is its ``eth0``, with an address in a private test range; the other end is a port of a
bridge in the test's own namespace, which gets the range's ``.254``), and takes them all away
again, the processes started in them first. ``cut`` sets a host's bridge port down (its link is
gone: packets are dropped, no connection is reset) and ``rejoin`` sets it up again.
``partition(a, b)`` cuts two hosts apart while both still reach every other host: each is told,
by a permanent neighbour entry, that the other's address lives at a MAC no port has, so the
bridge floods their frames to ports that drop them (silently, as a partition does: no reset, no
error), and ``heal(a, b)`` removes the entries (ARP finds the real ones again). Only ``ip`` is
needed; no firewall.

Needs root and ``ip``; ``unavailable`` says why not, for the caller to skip or fail.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

COMMAND_TIMEOUT = 20.0
#: a locally administered MAC that no test host has: frames sent to it reach nobody
NOWHERE_MAC = "02:00:5e:00:00:01"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def unavailable() -> str:
    """Why network namespaces cannot be made here, or '' when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    probe = f"brokerprobe{os.getpid()}"
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    ip("netns", "delete", probe, check=False)
    return ""


class Network:
    """Hosts ``h1``..``hN`` on 10.<x>.<y>.0/24 (``x``, ``y`` random per run), the test at .254."""

    def __init__(self, hosts: int) -> None:
        self.tag = f"{os.getpid() % 10000:04d}{random.randrange(100):02d}"
        self.prefix = f"10.{random.randrange(200, 250)}.{random.randrange(1, 250)}"
        self.bridge = f"bbr{self.tag}"
        self.names = [f"broker-mh{self.tag}-h{i}" for i in range(1, hosts + 1)]
        self.ports = [f"bv{self.tag}h{i}" for i in range(1, hosts + 1)]
        self.processes: list[subprocess.Popen[bytes]] = []
        self._made: list[str] = []

    @property
    def gateway(self) -> str:
        """The test's own address on the bridge."""
        return f"{self.prefix}.254"

    def address(self, host: int) -> str:
        return f"{self.prefix}.{host}"

    def create(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        self._made.append(f"link:{self.bridge}")
        ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for index, (name, port) in enumerate(zip(self.names, self.ports, strict=True), start=1):
            ip("netns", "add", name)
            self._made.append(f"netns:{name}")
            peer = f"bp{self.tag}h{index}"
            ip("link", "add", port, "type", "veth", "peer", "name", peer)
            ip("link", "set", peer, "netns", name)
            ip("link", "set", port, "master", self.bridge)
            ip("link", "set", port, "up")
            inside = ("netns", "exec", name, "ip")
            ip(*inside, "link", "set", peer, "name", "eth0")
            ip(*inside, "addr", "add", f"{self.address(index)}/24", "dev", "eth0")
            ip(*inside, "link", "set", "eth0", "up")
            ip(*inside, "link", "set", "lo", "up")

    def cut(self, host: int) -> None:
        ip("link", "set", self.ports[host - 1], "down")

    def rejoin(self, host: int) -> None:
        ip("link", "set", self.ports[host - 1], "up")

    def partition(self, a: int, b: int) -> None:
        """Drop every packet between hosts ``a`` and ``b``, both ways; the rest still talk."""
        for source, target in ((a, b), (b, a)):
            ip(*self._inside(source), "neigh", "replace", self.address(target),
               "lladdr", NOWHERE_MAC, "dev", "eth0", "nud", "permanent")  # fmt: skip

    def heal(self, a: int, b: int) -> None:
        """Undo ``partition(a, b)``."""
        for source, target in ((a, b), (b, a)):
            ip(*self._inside(source), "neigh", "del", self.address(target), "dev", "eth0",
               check=False)  # fmt: skip

    def _inside(self, host: int) -> tuple[str, ...]:
        return ("netns", "exec", self.names[host - 1], "ip")

    def wrap(self, host: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside host ``host``'s namespace."""
        return ["ip", "netns", "exec", self.names[host - 1], *argv]

    def start(
        self,
        host: int,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log: Path,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in host ``host``, in its own session (stopped by group id)."""
        handle: IO[bytes] = log.open("ab")
        try:
            process = subprocess.Popen(
                self.wrap(host, argv),
                env=dict(env),
                cwd=cwd,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            handle.close()
        self.processes.append(process)
        return process

    def stop_processes(self, grace: float = 10.0) -> None:
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)

    def pids_inside(self) -> list[int]:
        found: list[int] = []
        for name in self.names:
            out = ip("netns", "pids", name, check=False).stdout.split()
            found += [int(p) for p in out if p.isdigit()]
        return found

    def destroy(self) -> None:
        """Stop every process started here or still inside a namespace, then remove it all."""
        self.stop_processes()
        for pid in self.pids_inside():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for made in reversed(self._made):
            kind, _, name = made.partition(":")
            if kind == "netns":
                ip("netns", "delete", name, check=False)
            else:
                ip("link", "delete", name, check=False)
        self._made.clear()
