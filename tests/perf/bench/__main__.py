"""``python -m tests.perf.bench``: run the benchmark from the checkout (``make bench``)."""

from tests.perf.bench.commands import bench

if __name__ == "__main__":
    bench(prog_name="python -m tests.perf.bench")
