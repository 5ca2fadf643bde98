"""What operators and the console do to saved work: instances, drafts, manual starts,
alterations, dead-letter replay, recovery jobs and the runtime's status."""

__all__ = [
    "alteration_jobs",
    "alteration_plans",
    "alterations",
    "dead_letters",
    "drafts",
    "enums",
    "instance_queries",
    "instances",
    "paging",
    "recovery",
    "runtime_status",
    "starts",
]
