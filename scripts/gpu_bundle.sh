#!/usr/bin/env bash
# The GPU check, part 1 (runs here, no GPU needed): builds what the check runs and packs it into
# one folder that travels to a GPU machine without Bazel, apt or network (README, "The GPU check"):
#   bundle.tar.xz  bin/: every GPU test of //tests/cuda, bench/cuda_bench and tools/dtensor,
#                  optimized and stripped; lib/: the shared libraries they load that the GPU machine
#                  may lack (the project's own, Abseil, Gloo, OpenBLAS, ONNX, protobuf, Boost, ICU,
#                  ...), found by ldd; cuda_libs.txt: the CUDA libraries (cudart, cuBLAS/cuBLASLt,
#                  cuDNN, NCCL, NVRTC), which are the GPU machine's own, as are glibc and libstdc++;
#                  data/: the training text (dtensor train's default, which that machine may lack)
#   run.sh         a copy of scripts/gpu_run.sh, the part that runs there (it unpacks the archive)
#   BUILD_INFO     commit, date, compiler and CUDA versions
#   gpu_baseline.json  the last measured medians on a GPU kind, which run.sh prints beside a new run
# xz because OpenBLAS and ICU's data alone are 65 MiB unpacked (about 130 MiB in all, 25 packed).
# Fails (exit 1) when the build fails, when a binary needs a library that is not on this machine, or
# when the bundle is over its size limit (60 MiB: the GPU machine receives at most 64 MiB, working
# tree included).
#
# Usage: bash scripts/gpu_bundle.sh [DIR]   (default .gpu_bundle, ignored by git)
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-.gpu_bundle}
limit_bytes=$((60 * 1024 * 1024))

die() { echo "gpu_bundle: $*" >&2; exit 1; }

if [ ! -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]; then
  die "no CUDA toolkit at ${CUDA_PATH:-/usr/local/cuda} (nvcc): the GPU tests cannot be built here"
fi
[ "${SKIP_INSTALL_DEPS:-0}" = 1 ] || bash scripts/install_deps.sh >/dev/null

tests=$(bazel query --noshow_progress 'tests(//tests/cuda/...)' 2>/dev/null) ||
  die "bazel query of //tests/cuda failed"
[ -n "$tests" ] || die "no test under //tests/cuda (was the CUDA toolkit found at build time?)"
bazel build --noshow_progress $tests //bench:cuda_bench //tools:dtensor ||
  die "bazel build failed"

tmp="$bundle.tmp.$$"
rm -rf "$tmp" "$tmp.out"
trap 'rm -rf "$tmp" "$tmp.out"' EXIT
mkdir -p "$tmp/bin" "$tmp/lib" "$tmp/data"

bins=()     # the copies in the bundle
origins=()  # the built binaries, whose ldd resolves the project's own shared libraries (tests link
            # them dynamically, from bazel-bin's _solib folder by a relative RUNPATH)
for t in $tests //bench:cuda_bench //tools:dtensor; do
  rel=${t#//}; rel=${rel/://}
  [ -x "bazel-bin/$rel" ] || die "bazel-bin/$rel was not built"
  name=$(basename "$rel")
  [ -e "$tmp/bin/$name" ] && die "two binaries named $name"
  cp "bazel-bin/$rel" "$tmp/bin/$name"
  chmod u+w "$tmp/bin/$name"
  strip --strip-all "$tmp/bin/$name"
  bins+=("$tmp/bin/$name")
  origins+=("bazel-bin/$rel")
done

# Libraries the GPU machine provides itself: the CUDA libraries of its toolkit or PyTorch's wheels,
# the driver, and the C and C++ runtime (glibc, libstdc++, libgcc_s: that machine's are newer).
is_system_lib() {
  case "$1" in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | \
      librt.so.* | libstdc++.so.* | libgcc_s.so.*) return 0 ;;
  esac
  return 1
}
is_cuda_lib() {
  case "$1" in
    libcuda.so.* | libcudart.so.* | libcublas.so.* | libcublasLt.so.* | libcudnn*.so.* | \
      libnccl.so.* | libnvrtc*.so.* | libnvJitLink.so.* | libcurand.so.* | libcufft.so.* | \
      libcusparse.so.* | libcusolver.so.*) return 0 ;;
  esac
  return 1
}

: >"$tmp/cuda_libs.txt"
missing=()
for b in "${origins[@]}"; do
  while read -r soname arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then
      is_cuda_lib "$soname" && { echo "$soname" >>"$tmp/cuda_libs.txt"; continue; }
      missing+=("$soname (needed by $(basename "$b"))")
      continue
    fi
    is_system_lib "$soname" && continue
    if is_cuda_lib "$soname"; then
      echo "$soname" >>"$tmp/cuda_libs.txt"
      continue
    fi
    if [ ! -e "$tmp/lib/$soname" ]; then
      cp -L "$path" "$tmp/lib/$soname"
      chmod u+w "$tmp/lib/$soname"
      strip --strip-unneeded "$tmp/lib/$soname"
    fi
  done < <(ldd "$b")
done
((${#missing[@]} == 0)) || die "libraries not found on this machine: ${missing[*]}"
# cuBLASLt is opened at run time (kernels/cuda/cublaslt.h names it), so ldd does not list it.
lt=$(grep -o 'libcublasLt\.so\.[0-9]*' kernels/cuda/cublaslt.h | head -1)
[ -n "$lt" ] || die "kernels/cuda/cublaslt.h names no libcublasLt soname"
echo "$lt" >>"$tmp/cuda_libs.txt"
sort -u -o "$tmp/cuda_libs.txt" "$tmp/cuda_libs.txt"

text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || die "$text (the training text) is missing"
cp "$text" "$tmp/data/GPL-3"
{
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname)"
  echo "compiler: $(${CXX:-g++} --version | head -1)"
  echo "nvcc: $("${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" --version | grep -o 'release [^,]*')"
  echo "tests: $(echo $tests | tr ' ' '\n' | sed 's|.*:||' | tr '\n' ' ')"
} >"$tmp/BUILD_INFO"
unpacked=$(du -sb "$tmp" | cut -f1)

mkdir -p "$tmp.out"
tar -C "$tmp" -cf - bin lib data cuda_libs.txt BUILD_INFO | xz -T2 -6 >"$tmp.out/bundle.tar.xz"
cp "$tmp/BUILD_INFO" "$tmp.out/BUILD_INFO"
cp scripts/gpu_run.sh "$tmp.out/run.sh"
cp scripts/gpu_baseline.json "$tmp.out/gpu_baseline.json"
size=$(du -sb "$tmp.out" | cut -f1)
if [ "$size" -gt "$limit_bytes" ]; then
  du -ab "$tmp" | sort -rn | head -12 >&2
  rm -rf "$tmp.out"
  die "the bundle is $((size / 1024 / 1024)) MiB packed, over the $((limit_bytes / 1024 / 1024)) MiB limit"
fi
rm -rf "$bundle"
mv "$tmp.out" "$bundle"
echo "gpu_bundle: $bundle: ${#bins[@]} binaries, $(ls "$tmp/lib" | wc -l) libraries, $((size / 1024)) KiB packed" \
  "($((unpacked / 1024)) KiB unpacked; limit $((limit_bytes / 1024)) KiB); CUDA libraries expected on the GPU" \
  "machine: $(tr '\n' ' ' <"$tmp/cuda_libs.txt")"
