"""One way to start a stack of the broker's roles for the tests that run real processes (e2e,
the browser tests, chaos, multi-host, the soak and the benchmark).

- ``process``: one started process: its own process group, bounded waits, its log kept.
- ``roles``: each role's command line, as the deploy files start it.
- ``config``: the settings the roles share: embedded or services, free ports.
- ``roster``: ``Stack``, the roles one test starts, stopped together by pid.
- ``postgres``, ``redis_server``: servers of a test's own, for the tests that stop, kill or cut
  them off (the shared services on loopback serve every other test).
"""
