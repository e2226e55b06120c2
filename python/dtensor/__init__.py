"""dtensor: tensor-parallel DTensors with torch.distributed.tensor's names, in native code.

The extension module _dtensor is built by Bazel (`bazel build //python/...`); in a checkout it is
found under bazel-bin, beside this package's sources.
"""
import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))
_built = _os.path.join(_here, "..", "..", "bazel-bin", "python", "dtensor")
if not _os.path.exists(_os.path.join(_here, "_dtensor.so")) and _os.path.isdir(_built):
    __path__.append(_built)  # the package's modules live in two folders: sources and build output

from ._dtensor import (  # noqa: E402
    DTensor,
    DTensorCommError,
    DTensorError,
    DeviceMesh,
    Partial,
    Placement,
    Replicate,
    Shard,
    World,
    distribute_tensor,
    init_device_mesh,
    ops,
    run_threads,
)

__all__ = [
    "DTensor", "DTensorCommError", "DTensorError", "DeviceMesh", "Partial", "Placement",
    "Replicate", "Shard", "World", "distribute_tensor", "init_device_mesh", "ops", "run_threads",
]

# Public names print as dtensor.X (as torch's do), not as the private extension module's.
for _name in ("DTensor", "DTensorCommError", "DTensorError", "DeviceMesh", "Placement", "World"):
    globals()[_name].__module__ = "dtensor"
