"""Macros for CUDA code: `cuda_library` compiles .cu files with nvcc; the `cuda_cc_*` wrappers are
cc rules for host code that needs the CUDA libraries.

Every target made here is incompatible (skipped by `bazel build //...` and `bazel test //...`, an
error when named explicitly) when the toolkit is absent (see cuda_configure.bzl) or the build says
`--define=cuda=off`; the CPU targets never depend on them.

cuda_library(name, srcs, hdrs, deps, copts, cu_hdrs, gencode, **kwargs)
  srcs     .cu files; each is compiled by its own genrule into one relocatable object
           (whole-program mode, no -rdc: a kernel and its launcher live in the same .cu file).
  hdrs     headers of the library (its interface); the .cu files may include them.
  cu_hdrs  other headers the .cu files include (files or filegroups): a genrule sees only the
           inputs it lists, so .cu files should include little (no absl, no Tensor).
  deps     cc deps of the wrapping cc_library (the objects need @cuda//:cudart, added here).
  copts    extra nvcc flags.
  gencode  nvcc -gencode values; default CUDA_GENCODE: SASS for sm_80 (A100) and sm_90 (H100/H200),
           plus compute_90 PTX so newer GPUs can JIT-compile the kernels. No sm_90a: no kernel
           uses its architecture-specific instructions (wgmma, setmaxnreg), H100/H200 run the sm_90
           SASS, and a third code target was compiled in every build (its share of the build's time
           was not measured apart; nvcc was 461 s of a cold build's 3541 s of action time).
The objects are compiled with -std=c++20 -O3 -Xcompiler -fPIC and wrapped in a cc_library `name`.
"""

load("@cuda_config//:defs.bzl", "CUDA_AVAILABLE", "NVCC")
load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")

CUDA_GENCODE = [
    "arch=compute_80,code=sm_80",
    "arch=compute_90,code=[sm_90,compute_90]",
]

NVCC_FLAGS = [
    "-std=c++20",
    "-O3",
    "-Xcompiler=-fPIC",
    "-Xcompiler=-Wall",
    "-Xcompiler=-Wno-sign-compare",
    "--expt-relaxed-constexpr",
    "-DNDEBUG",
]

def cuda_compatible_with():
    """target_compatible_with for CUDA targets."""
    if not CUDA_AVAILABLE:
        return ["@platforms//:incompatible"]
    return select({
        "//tools/cuda:cuda_off": ["@platforms//:incompatible"],
        "//conditions:default": [],
    })

def _without_cuda(labels):
    # Without a toolkit the @cuda repository may not exist: the (incompatible) targets drop it.
    if CUDA_AVAILABLE:
        return labels
    return [l for l in labels if not l.startswith("@cuda//")]

def cuda_library(name, srcs = [], hdrs = [], deps = [], copts = [], cu_hdrs = [],
                 gencode = CUDA_GENCODE, **kwargs):
    objs = []
    flags = " ".join(NVCC_FLAGS + ["-gencode " + g for g in gencode] + copts)
    for src in srcs:
        if not src.endswith(".cu"):
            fail("cuda_library %s: %s is not a .cu file" % (name, src))
        base = src[:-len(".cu")]
        obj = "_objs/%s/%s.pic.o" % (name, base)
        native.genrule(
            name = "%s_%s_nvcc" % (name, base.replace("/", "_")),
            srcs = [src] + hdrs + cu_hdrs,
            outs = [obj],
            cmd = "TMPDIR=$(@D) %s %s -I. -I$(GENDIR) -c $(location %s) -o $@" % (NVCC, flags, src),
            message = "nvcc %s" % src,
            target_compatible_with = cuda_compatible_with(),
            visibility = ["//visibility:private"],
            tags = kwargs.get("tags", []),
        )
        objs.append(obj)
    cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = _without_cuda(deps + ["@cuda//:cudart"]),
        target_compatible_with = cuda_compatible_with(),
        **kwargs
    )

def cuda_cc_library(name, deps = [], **kwargs):
    """A cc_library of host code using the CUDA libraries (listed in deps: @cuda//:cudart, ...)."""
    cc_library(
        name = name,
        deps = _without_cuda(deps),
        target_compatible_with = cuda_compatible_with(),
        **kwargs
    )

def cuda_cc_test(name, deps = [], **kwargs):
    """A cc_test that needs the CUDA libraries. It must GTEST_SKIP() when no GPU is present."""
    cc_test(
        name = name,
        deps = _without_cuda(deps),
        target_compatible_with = cuda_compatible_with(),
        **kwargs
    )

def cuda_cc_binary(name, deps = [], **kwargs):
    cc_binary(
        name = name,
        deps = _without_cuda(deps),
        target_compatible_with = cuda_compatible_with(),
        **kwargs
    )

def if_cuda(labels, otherwise = []):
    """`labels` in builds with CUDA (toolkit present, no --define=cuda=off), else `otherwise`."""
    if not CUDA_AVAILABLE:
        return otherwise
    return select({
        "//tools/cuda:cuda_off": otherwise,
        "//conditions:default": labels,
    })
