"""The soak: the production roles under a steady mixed load and scheduled faults for minutes to
hours, sampled every few seconds and reported per window (``python -m tests.soak``, ``make soak``).
"""
