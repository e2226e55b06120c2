# The tests import the package from the checkout (python/dtensor), whose extension module is built
# by `bazel build //python/...` under bazel-bin.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import pytest

# Lines a test hands to `summary` are printed in pytest's closing summary. Printed from inside a
# test they would be lost under pytest-xdist (the test command runs `pytest -n 2`), whose workers'
# output is not shown; a test report's user_properties travel from the worker to the controller.
_summary_lines = []


@pytest.fixture
def summary(request):
    """summary(text): `text` goes into the run's closing summary (the test command greps it)."""
    return lambda text: request.node.user_properties.append(("summary", text))


def pytest_runtest_logreport(report):
    if report.when == "teardown":  # every phase's report carries the test's properties: take one
        _summary_lines.extend(text for key, text in report.user_properties if key == "summary")


def pytest_terminal_summary(terminalreporter):
    if _summary_lines:
        terminalreporter.write_sep("=", "summary")
        for text in _summary_lines:
            terminalreporter.write_line(text)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    # With torch imported, pytest's collected items outlive interpreter teardown, so nanobind's exit
    # check reported the dtensor Placements of parametrized tests as leaks (no binding leaks them).
    session.items.clear()
