"""Activity implementations, grouped by family; each declares itself with ``@activity``."""
