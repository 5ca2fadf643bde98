"""The suite's shared fixtures live in ``tests/support/fixtures.py`` (settings, databases,
services, the session factory); the helpers the tiers share live beside it in ``tests/support``."""

pytest_plugins = ["tests.support.fixtures"]
