"""Activity implementations, grouped by family; ``broker.engine.catalog`` maps type names."""
