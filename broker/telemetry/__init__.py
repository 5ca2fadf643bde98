"""What a process tells operators: JSON logs, OpenTelemetry traces and Prometheus metrics."""

__all__ = [
    "logs",
    "metrics",
    "tracing",
]
