# The tests import the package from the checkout (python/dtensor), whose extension module is built
# by `bazel build //python/...` under bazel-bin.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
