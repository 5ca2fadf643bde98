"""Test doubles and shared fixtures data of the test suite."""
