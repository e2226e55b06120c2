# The tests import the package from the checkout (python/dtensor), whose extension module is built
# by `bazel build //python/...` under bazel-bin.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    # With torch imported, pytest's collected items outlive interpreter teardown, so nanobind's exit
    # check reported the dtensor Placements of parametrized tests as leaks (no binding leaks them).
    session.items.clear()
