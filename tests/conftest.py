"""Shared pytest hooks for every test directory (loaded through the repository's pytest.ini).

A test file whose tests were all skipped (e.g. the conformance corpus is absent in a user's
clone) exits with status 77, which ctest reports as "Skipped" instead of "Passed", so a skip
is visible in the test summary and never mistaken for a pass."""

import os

SKIPPED_EXIT = 77

# `loom up` starts an IFRT proxy on 127.0.0.1:29000 by default; tests run clusters side by side,
# so they start none unless they ask for one (--proxy-port on a free port: tests/integration/test_proxy.py).
os.environ.setdefault("LOOM_PROXY_PORT", "0")


def pytest_sessionfinish(session, exitstatus):
    if exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {}) if reporter else {}
    if stats.get("skipped") and not stats.get("passed"):
        session.exitstatus = SKIPPED_EXIT
