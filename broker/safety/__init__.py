"""The ground rules of what the broker reads and writes: bounded input (JSON and whole numbers)
and private files; below every layer that takes input or keeps a secret."""

__all__ = ["bounded", "private_files"]
