"""The op families: one folder each under ops/ (ops/family.h, docs/ADDING_AN_OP.md).

A new family is its folder (BUILD.bazel with :defs, :rules and :backward) and its name here; the
aggregate targets //ops:defs, //strategies and //autograd then link it.
"""

OP_FAMILIES = [
    "attention",
    "embedding",
    "flex_attention",
    "grouped_mm",
    "loss",
    "matrix",
    "norm",
    "pointwise",
    "pooling",
    "reduction",
    "scan",
    "selection",
    "view",
]

def family_targets(part):
    """The `part` target ("defs", "rules" or "backward") of every family."""
    return ["//ops/%s:%s" % (f, part) for f in OP_FAMILIES]
