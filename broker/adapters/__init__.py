"""The infrastructure the use-cases stand on, behind their ports: locks (file, Redis, PostgreSQL),
the Celery configuration and kombu transports, the rate-limit buckets and the health probes.
It may import the runtime's ports and names, the store and the ground floor; never a web app."""

__all__ = ["buckets", "health", "locks", "transport"]
