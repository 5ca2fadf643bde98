"""The soak's chart (matplotlib, drawn without a display): throughput, latency, RSS and rows over
time, one panel each, with the faults marked as vertical lines on every panel."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.soak.report import Finished, Sample, percentile

BUCKET = 30.0  # seconds per point of the throughput and latency panels


def draw(
    path: Path,
    *,
    title: str,
    samples: Sequence[Sample],
    accepted_at: Sequence[float],
    finished: Sequence[Finished],
    faults: Sequence[tuple[float, str]],
    bounded_tables: Sequence[str],
    history_tables: Sequence[str],
    duration: float,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = [i * BUCKET for i in range(int(duration // BUCKET) + 1)]
    minutes = [(b + BUCKET / 2) / 60 for b in buckets]

    def rate(times: Sequence[float]) -> list[float]:
        return [sum(1 for t in times if b <= t < b + BUCKET) / BUCKET for b in buckets]

    def latency(q: float) -> list[float]:
        return [
            percentile([f.latency for f in finished if b <= f.at < b + BUCKET], q) for b in buckets
        ]

    fig, axes = plt.subplots(4, 1, figsize=(11, 12), sharex=True)
    ax = axes[0]
    ax.plot(minutes, rate(accepted_at), label="accepted/s")
    ax.plot(minutes, rate([f.at for f in finished]), label="finished/s")
    ax.set_ylabel("requests per second")
    ax = axes[1]
    ax.plot(minutes, latency(50), label="p50")
    ax.plot(minutes, latency(99), label="p99")
    ax.set_ylabel("submit to terminal, s")
    ax = axes[2]
    at = [s.at / 60 for s in samples]
    roles = sorted({r for s in samples for r in s.rss})
    for role in roles:
        ax.plot(at, [s.rss.get(role, 0) / 2**20 for s in samples], label=role)
    ax.set_ylabel("RSS, MiB")
    ax = axes[3]
    ax.plot(at, [sum(s.rows.get(t, 0) for t in bounded_tables) for s in samples],
            label="purged tables (" + ", ".join(bounded_tables) + ")")  # fmt: skip
    ax.plot(at, [s.outbox_depth for s in samples], label="outbox depth")
    ax.plot(at, [s.bookmark_queue_depth for s in samples], label="bookmark-queue depth")
    ax.set_ylabel("rows")
    ax2 = ax.twinx()
    ax2.plot(at, [sum(s.rows.get(t, 0) for t in history_tables) for s in samples],
             color="grey", linestyle=":", label="request history (kept)")  # fmt: skip
    ax2.set_ylabel("request history rows")
    ax2.legend(loc="upper right", fontsize=7)
    ax.set_xlabel("minutes")
    for ax in axes:
        for when, _ in faults:
            ax.axvline(when / 60, color="red", alpha=0.35, linewidth=1)
        ax.legend(loc="upper left", fontsize=7)
        ax.grid(alpha=0.3)
    top = axes[0]
    for when, name in faults:
        top.annotate(name, (when / 60, 1.0), xycoords=("data", "axes fraction"), rotation=90,
                     fontsize=6, va="top", ha="right", color="red")  # fmt: skip
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
