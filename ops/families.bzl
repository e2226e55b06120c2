"""The op families: one folder each under ops/ (ops/family.h, docs/ADDING_AN_OP.md).

A new family is its folder (a BUILD.bazel calling op_family()) and its name here; the aggregate
targets //ops:defs, //strategies and //autograd then link it.
"""

load("@rules_cc//cc:defs.bzl", "cc_library")

OP_FAMILIES = [
    "attention",
    "complex",
    "conv",
    "embedding",
    "factory",
    "flex_attention",
    "grouped_mm",
    "indexing",
    "loss",
    "masked",
    "matrix",
    "metadata",
    "norm",
    "planned",
    "pointwise",
    "pooling",
    "random",
    "reduction",
    "sampler",
    "scan",
    "selection",
    "strided",
    "spectral",
    "view",
]

def family_targets(part):
    """The `part` target ("defs", "rules" or "backward") of every family."""
    return ["//ops/%s:%s" % (f, part) for f in OP_FAMILIES]

def op_family(deps = [], exclude = []):
    """The three targets of the family in this folder, by file name.

    :defs     every .cc not named below (defs.cc, backward_defs.cc, steps.cc, helpers) and every .h
    :rules    *rules*.cc, over :defs and the rule vocabulary (//strategies:common)
    :backward *backward.cc, over autograd's functional ops (//autograd:core)

    All three are alwayslink: their files register themselves (ops/family.h). `deps` go to :defs and
    :backward (another family's definitions, a header-only target of this folder); `exclude` names
    files of this folder that belong to none of the three.
    """
    cc = native.glob(["*.cc"], exclude = exclude)
    rules = [f for f in cc if "rules" in f]
    backward = [f for f in cc if f.endswith("backward.cc")]
    cc_library(
        name = "defs",
        srcs = [f for f in cc if f not in rules and f not in backward],
        hdrs = native.glob(["*.h"], exclude = exclude),
        deps = deps + [
            "//dtensor:partial_split",
            "//kernels/cpu",
            "//ops/common",
            "@system//:absl",
        ],
        alwayslink = True,
        visibility = ["//visibility:public"],
    )
    cc_library(
        name = "rules",
        srcs = rules,
        deps = [
            ":defs",
            "//strategies:common",
            "@system//:absl",
        ],
        alwayslink = True,
        visibility = ["//visibility:public"],
    )
    cc_library(
        name = "backward",
        srcs = backward,
        deps = deps + [
            "//autograd:core",
            "@system//:absl",
        ],
        alwayslink = True,
        visibility = ["//visibility:public"],
    )
