#!/usr/bin/env bash
# The GPU check, part 2: runs on the GPU machine from the bundle that scripts/gpu_bundle.sh made
# (no Bazel, no network; bash, python3 and the machine's CUDA 13 libraries). docs/GPU_CHECK.md says
# how to send it. In order:
#   1. finds the CUDA libraries the bundle expects (cuda_libs.txt) in the machine's toolkit or
#      PyTorch's wheels ($DTENSOR_CUDA_LIBS first, a colon-separated list of folders), and checks
#      that every binary loads (ldd, then --gtest_list_tests / --help / --benchmark_list_tests);
#   2. without a GPU (nvidia-smi lists none) stops there: "no GPU visible", exit 77;
#   3. every GPU test, each case counted from GoogleTest's XML: passed, failed, and skipped cases
#      sorted by why. A case that needs more GPUs than the machine has ("needs N CUDA devices") is
#      its own row; any other skip while a GPU is visible is a failure;
#   4. dtensor train --device cuda --check against one rank: tp=2 as threads sharing the GPU, NCCL
#      with one rank, --moe over ep=2,tp=2 and context parallel over cp=2, each with its host
#      fallbacks;
#   5. bench/cuda_bench (JSON kept), summarized: copy bandwidth, each memory-bound kernel as a
#      fraction of it, bf16 GEMM against cuBLAS, cuDNN SDPA forward and backward TFLOP/s;
# then prints one Markdown table for BENCHMARKS.md with the device named. table.md, cuda_bench.json
# and the logs (packed at the end as logs.tar.gz) go to $OUT when set (the device tool's output
# folder, which brings back 8 files at most), else to a fresh temporary folder.
#
# Exit: 0 every step passed; 1 a step failed; 2 the bundle is broken (a binary does not load, a
# library is missing); 77 no GPU visible, every binary loaded.
# Usage: bash scripts/gpu_run.sh [BUNDLE] [--quick] [--tests-only] [--sanitize=FILTER]
#        (BUNDLE: the folder gpu_bundle.sh made; default .gpu_bundle beside scripts/, or this
#        script's folder when it is the bundle's run.sh; --quick: short benchmark times;
#        --tests-only: steps 1 to 3 only, to recheck kernels in less device time;
#        --sanitize=FILTER: after step 3, the GPU tests' cases matching the GoogleTest FILTER again
#        under compute-sanitizer's memcheck and racecheck (shared-memory hazards), a row each; any
#        error or hazard fails the row). The archive is unpacked into a temporary folder.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle="" quick=0 tests_only=0 sanitize=""
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    --tests-only) tests_only=1 ;;
    --sanitize=?*) sanitize=${a#--sanitize=} ;;
    -*) echo "gpu_run: unknown flag $a (accepted: --quick, --tests-only, --sanitize=FILTER)" >&2; exit 2 ;;
    *) bundle=$a ;;
  esac
done
if [ -z "$bundle" ]; then
  if [ -f "$here/bundle.tar.xz" ]; then bundle=$here; else bundle=$here/../.gpu_bundle; fi
fi
[ -f "$bundle/bundle.tar.xz" ] ||
  { echo "gpu_run: $bundle holds no bundle.tar.xz (make one with scripts/gpu_bundle.sh)" >&2; exit 2; }
t0=$(date +%s)
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
# Unpacked with Python's tarfile (lzma), which needs no xz program.
packed=$(cd "$bundle" && pwd)/bundle.tar.xz
unpack=$(mktemp -d)
# The device tool brings back at most 8 files: on every exit the logs are packed into one archive
# beside table.md and cuda_bench.json.
pack_logs() {
  local pack=() f
  for f in "$out"/load_*.err "$out"/tests "$out"/sanitize "$out"/train_*.log "$out"/cuda_bench.log; do
    [ -e "$f" ] && pack+=("$(basename "$f")")
  done
  ((${#pack[@]})) || return 0
  (cd "$out" && tar -czf logs.tar.gz --remove-files "${pack[@]}") ||
    echo "gpu_run: could not pack the logs in $out (left as they are)" >&2
}
trap 'pack_logs; rm -rf "$unpack"' EXIT
bundle=$unpack/bundle
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$packed" "$bundle" ||
  { echo "gpu_run: cannot unpack $packed" >&2; exit 2; }
[ -d "$bundle/bin" ] && [ -f "$bundle/cuda_libs.txt" ] ||
  { echo "gpu_run: $packed holds no bin/ and cuda_libs.txt" >&2; exit 2; }
echo "gpu_run: bundle $packed ($(head -1 "$bundle/BUILD_INFO")), unpacked in $bundle; logs in $out"

# ---- 1. Libraries and loading.
cands=()
IFS=: read -r -a extra <<<"${DTENSOR_CUDA_LIBS:-}"
cands+=("${extra[@]}")
cands+=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib)
# PyTorch's CUDA wheels (nvidia-*-cu13 keep theirs under site-packages/nvidia/**/lib).
for py in python3 /opt/torch/.venv/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || [ -x "$py" ] || continue
  while IFS= read -r d; do cands+=("$d"); done < <("$py" - 2>/dev/null <<'PY'
import glob, os, site, sys
roots = set(site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p])
for r in sorted(roots):
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "**", "lib"), recursive=True)):
        print(d)
    for d in sorted(glob.glob(os.path.join(r, "torch", "lib"))):
        print(d)
PY
)
done
cands+=(/usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu)
libpath=$bundle/lib
missing=()
while read -r soname; do
  [ -n "$soname" ] || continue
  found=""
  for d in "${cands[@]}"; do
    if [ -e "$d/$soname" ]; then found=$d; break; fi
  done
  if [ -z "$found" ]; then
    # The driver library exists only where a GPU driver is installed: its absence is "no GPU".
    [ "$soname" = libcuda.so.1 ] && continue
    missing+=("$soname")
    continue
  fi
  case ":$libpath:" in *":$found:"*) ;; *) libpath=$libpath:$found ;; esac
done <"$bundle/cuda_libs.txt"
if ((${#missing[@]})); then
  echo "gpu_run: CUDA libraries not found: ${missing[*]}" >&2
  echo "gpu_run: looked in: ${cands[*]}" >&2
  echo "gpu_run: set DTENSOR_CUDA_LIBS to the folder(s) holding them (colon-separated)" >&2
  exit 2
fi
export LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "gpu_run: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# Arguments a test binary needs besides GoogleTest's (train_nccl_test runs the bundle's dtensor).
test_args() { [ "$1" = train_nccl_test ] && echo "$bundle/bin/dtensor"; true; }

broken=0
nbins=0
for b in "$bundle"/bin/*; do
  nbins=$((nbins + 1))
  name=$(basename "$b")
  if ldd "$b" 2>&1 | grep -v 'libcuda.so.1 => not found' | grep -q 'not found'; then
    echo "gpu_run: $name does not load:" >&2
    ldd "$b" 2>&1 | grep 'not found' >&2
    broken=1
    continue
  fi
  case "$name" in
    dtensor) "$b" --help >/dev/null 2>"$out/load_$name.err" ;;
    cuda_bench) "$b" --benchmark_list_tests=true >/dev/null 2>"$out/load_$name.err" ;;
    *) "$b" --gtest_list_tests $(test_args "$name") >/dev/null 2>"$out/load_$name.err" ;;
  esac
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "gpu_run: $name exits $rc when listing its cases:" >&2
    tail -5 "$out/load_$name.err" >&2
    broken=1
  fi
done
[ "$broken" -eq 0 ] || exit 2
echo "gpu_run: every binary of the bundle loads ($nbins)"

# ---- 2. A GPU?
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true); fi
if [ "$gpus" -eq 0 ]; then
  echo "gpu_run: no GPU visible (nvidia-smi lists none): nothing run on a GPU; every binary loaded"
  exit 77
fi
device=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)
echo "gpu_run: $gpus GPU(s); first: $device"

rows=()  # "step|result|detail"
record() { rows+=("$1|$2|$3"); echo "gpu_run: $1: $2 ($3)"; }
secs() { echo $(($(date +%s) - $1)); }
text=$bundle/data/GPL-3
export DTENSOR_TRAIN_TEXT=$text

# ---- 3. GPU tests, one GoogleTest XML each.
mkdir -p "$out/tests"
for b in "$bundle"/bin/*; do
  name=$(basename "$b")
  case "$name" in dtensor | cuda_bench) continue ;; esac
  s=$(date +%s)
  TEST_TMPDIR=$(mktemp -d) timeout -k 10 180 "$b" --gtest_output="xml:$out/tests/$name.xml" $(test_args "$name") \
    >"$out/tests/$name.log" 2>&1
  echo "$?" >"$out/tests/$name.rc"
  echo "gpu_run: $name exit $(cat "$out/tests/$name.rc") in $(secs "$s") s"
done
summary=$(python3 - "$out/tests" "$gpus" <<'PY'
import glob, os, re, sys
import xml.etree.ElementTree as ET
folder, gpus = sys.argv[1], int(sys.argv[2])
passed, failed, needs = [], [], {}
for log in sorted(glob.glob(os.path.join(folder, "*.log"))):
    name = os.path.basename(log)[:-4]
    rc = int(open(os.path.join(folder, name + ".rc")).read().strip() or 1)
    xml = os.path.join(folder, name + ".xml")
    if not os.path.exists(xml):
        failed.append(f"{name}: no XML (exit {rc}; crashed or timed out)")
        continue
    bad_before = len(failed)
    for case in ET.parse(xml).getroot().iter("testcase"):
        full = f"{name}:{case.get('classname')}.{case.get('name')}"
        if case.find("failure") is not None:
            failed.append(full)
        elif case.get("result") == "skipped":
            el = case.find("skipped")
            msg = (el.text or el.get("message", "")) if el is not None else ""
            m = re.search(r"needs (\d+) (?:CUDA devices|GPUs)", msg)
            if m and int(m.group(1)) > gpus:
                needs.setdefault(int(m.group(1)), []).append(full)
            else:
                failed.append(f"{full} skipped with a GPU visible: {msg.strip().splitlines()[-1] if msg.strip() else '?'}")
        elif case.get("status") == "run":
            passed.append(full)
    if rc != 0 and len(failed) == bad_before:
        failed.append(f"{name}: exit {rc} with no failed case")
print(f"PASSED {len(passed)}")
print(f"FAILED {len(failed)}")
for f in failed:
    print(f"FAIL {f[:200]}")
for n, cases in sorted(needs.items()):
    print(f"NEEDS {n} {len(cases)} {', '.join(c.split(':', 1)[1] for c in cases)}")
PY
)
echo "$summary" | sed 's/^/gpu_run: tests: /'
tp=$(sed -n 's/^PASSED //p' <<<"$summary")
tf=$(sed -n 's/^FAILED //p' <<<"$summary")
if [ -n "$tf" ] && [ "$tf" -eq 0 ]; then
  record "GPU tests (tests/cuda, every case)" pass "$tp cases passed, 0 failed"
else
  record "GPU tests (tests/cuda, every case)" FAIL "$tp passed, ${tf:-?} failed: $(grep '^FAIL ' <<<"$summary" | sed 's/^FAIL //' | head -5 | tr '\n' ';')"
fi
while read -r _ n k names; do
  [ -n "$n" ] || continue
  record "needs $n GPUs (this machine has $gpus)" "not run" "$k cases: $names"
done < <(grep '^NEEDS ' <<<"$summary")

# ---- 3b. With --sanitize=FILTER: those cases under compute-sanitizer (memcheck, racecheck).
# Binaries that are no GoogleTest or start ranks are left out; a binary with no matching case is
# skipped (one whose cases run on the CPU only passes trivially).
if [ -n "$sanitize" ]; then
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$cs" ]; then
    record "compute-sanitizer ($sanitize)" FAIL "compute-sanitizer not found (PATH, /usr/local/cuda*/bin)"
  else
    mkdir -p "$out/sanitize"
    for tool in memcheck racecheck; do
      s=$(date +%s) nbin=0 ncase=0 bad=""
      for b in "$bundle"/bin/*; do
        name=$(basename "$b")
        case "$name" in dtensor | cuda_bench | nccl_test | train_nccl_test) continue ;; esac
        n=$("$b" --gtest_list_tests --gtest_filter="$sanitize" 2>/dev/null | grep -c '^  ' || true)
        [ "${n:-0}" -gt 0 ] || continue
        nbin=$((nbin + 1)) ncase=$((ncase + n))
        log=$out/sanitize/$tool.$name.log
        TEST_TMPDIR=$(mktemp -d) timeout -k 10 300 "$cs" --tool "$tool" --error-exitcode 9 \
          "$b" --gtest_filter="$sanitize" >"$log" 2>&1
        rc=$?
        last=$(grep -E '(ERROR|RACECHECK) SUMMARY' "$log" | tail -1)
        [ "$rc" -eq 0 ] || bad+="$name: exit $rc ${last:-no summary}; "
      done
      if [ "$nbin" -eq 0 ]; then
        record "compute-sanitizer $tool ($sanitize)" FAIL "no GPU test case matches the filter"
      elif [ -z "$bad" ]; then
        record "compute-sanitizer $tool ($sanitize)" pass "$ncase cases in $nbin binaries, no error; $(secs "$s") s"
      else
        record "compute-sanitizer $tool ($sanitize)" FAIL "$bad"
      fi
    done
  fi
fi

# ---- 4. Training on the GPU against one rank (not with --tests-only).
if [ "$tests_only" -eq 0 ]; then
small="--steps 20 --log-every 1000 --sample 0 --text $text"
train_row() {  # label, then dtensor train flags
  local label=$1; shift
  local log="$out/train_$(echo "$label" | tr -c 'a-zA-Z0-9' '_').log" s
  s=$(date +%s)
  if timeout -k 10 120 "$bundle/bin/dtensor" train "$@" $small --check >"$log" 2>&1; then
    local check fb
    check=$(grep -m1 -E '^check' "$log")
    fb=$(grep -m1 -E '^host fallbacks' "$log" | sed 's/^host fallbacks[^:]*: //')
    record "train $label" pass "$(secs "$s") s; $check; host fallbacks: ${fb:-not reported}"
  else
    record "train $label" FAIL "exit $?: $(tail -1 "$log")"
  fi
}
train_row "--device cuda --mesh tp=2 (threads)" --device cuda --mesh tp=2
train_row "--backend nccl --device cuda --mesh tp=1" --backend nccl --device cuda --mesh tp=1
train_row "--device cuda --moe 4 --top-k 2 --mesh ep=2,tp=2" --device cuda --moe 4 --top-k 2 --mesh ep=2,tp=2
train_row "--device cuda --mesh cp=2" --device cuda --mesh cp=2
fi

# ---- 5. Kernel benchmarks.
# 5 repetitions, interleaved at random, so each figure is a median with its spread.
bench_args=(--benchmark_counters_tabular=true --benchmark_out="$out/cuda_bench.json" --benchmark_out_format=json
            --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
            --benchmark_report_aggregates_only=false)
[ "$quick" -eq 1 ] && bench_args+=(--benchmark_min_time=0.05)
s=$(date +%s)
if [ "$tests_only" -eq 1 ]; then
  : # no benchmarks
elif timeout -k 10 240 "$bundle/bin/cuda_bench" "${bench_args[@]}" >"$out/cuda_bench.log" 2>&1; then
  # A benchmark that reported an error (SkipWithError) did not measure anything: a failure here.
  errors=$(python3 -c 'import json, sys
b = json.load(open(sys.argv[1]))["benchmarks"]
print("; ".join(x["name"] + ": " + x.get("error_message", "") for x in b if x.get("error_occurred")))' \
    "$out/cuda_bench.json" 2>&1)
  if [ -z "$errors" ]; then
    record "bench/cuda_bench" pass "$(secs "$s") s; figures below"
  else
    record "bench/cuda_bench" FAIL "${errors:0:300}"
  fi
else
  record "bench/cuda_bench" FAIL "exit $?: $(tail -1 "$out/cuda_bench.log")"
fi

rc=0
for row in "${rows[@]}"; do
  case "$row" in *"|FAIL|"*) rc=1 ;; esac
done
# The table for BENCHMARKS.md, also kept as $out/table.md.
table() {
echo
echo "## GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), $device ($gpus GPU(s))"
echo
echo "Bundle: $(head -2 "$bundle/BUILD_INFO" | tr '\n' ';' | sed 's/;$//'). Total $(secs "$t0") s."
echo
echo "| step | result | detail |"
echo "|---|---|---|"
for row in "${rows[@]}"; do
  IFS='|' read -r step result detail <<<"$row"
  echo "| $step | $result | $detail |"
done
if [ -s "$out/cuda_bench.json" ]; then
  echo
  baseline=$here/gpu_baseline.json
  python3 - "$out/cuda_bench.json" "$baseline" "$device" <<'PY'
import collections, json, os, statistics, sys
runs = [b for b in json.load(open(sys.argv[1]))["benchmarks"] if b.get("run_type", "iteration") == "iteration"]
groups = collections.OrderedDict()
# In declaration order (the repetitions ran in random order).
for b in sorted(runs, key=lambda b: (b.get("family_index", 0), b.get("per_family_instance_index", 0))):
    groups.setdefault(b.get("run_name", b["name"]), []).append(b)
def stat(bs, key):
    v = [b[key] for b in bs if key in b]
    if not v:
        return None
    return statistics.median(v), min(v), max(v)
def show(t, fmt):
    return "" if t is None else (fmt % t[0]) + " (" + (fmt % t[1]) + "-" + (fmt % t[2]) + ")"
print("Medians of", max(len(v) for v in groups.values()), "repetitions run in random order, (min-max).")
print()
print("| benchmark | time | GB/s | of copy | of HBM peak | TFLOP/s |")
print("|---|---:|---:|---:|---:|---:|")
for name, bs in groups.items():
    errs = [b for b in bs if b.get("error_occurred")]
    if errs:
        print(f"| {name} | error: {errs[0].get('error_message', '')} | | | | |")
        continue
    label = name + (f" ({bs[0]['label']})" if bs[0].get("label") else "")
    t = stat(bs, "real_time")
    print(f"| {label} | {t[0]:.3g} {bs[0]['time_unit']} ({t[1]:.3g}-{t[2]:.3g}) | {show(stat(bs, 'GB/s'), '%.0f')} | "
          f"{show(stat(bs, 'of_copy'), '%.2f')} | {show(stat(bs, 'of_HBM'), '%.2f')} | {show(stat(bs, 'TFLOP/s'), '%.0f')} |")
mm = next((v for n, v in groups.items() if n.startswith("BM_GemmBf16/")), None)
cb = next((v for n, v in groups.items() if n.startswith("BM_GemmBf16CublasDirect")), None)
if mm and cb and all("TFLOP/s" in b for b in mm + cb):
    # The ratio of the two in each repetition (repetitions interleaved at random), then the median.
    by_rep = {b.get("repetition_index", 0): b["TFLOP/s"] for b in cb}
    r = sorted(b["TFLOP/s"] / by_rep[b.get("repetition_index", 0)] for b in mm if b.get("repetition_index", 0) in by_rep)
    print(f"\nbf16 GEMM 8192^3, kernels::cuda::mm / cuBLAS direct, per repetition: median {statistics.median(r):.3f} "
          f"({r[0]:.3f}-{r[-1]:.3f})")
mem = [(n, statistics.median(b["of_copy"] for b in v)) for n, v in groups.items()
       if all("of_copy" in b for b in v) and not n.startswith("BM_DeviceCopy")]
if mem:
    lo = min(mem, key=lambda x: x[1])
    print(f"memory-bound kernels at >= 0.7 of the copy (median): {sum(x >= 0.7 for _, x in mem)} of {len(mem)}; "
          f"lowest {lo[0]} {lo[1]:.2f}")
# Beside the last measured run on the same kind of GPU (scripts/gpu_baseline.json), when there is one:
# another lease of the same kind, so a change of a few per cent is within what leases differ by.
base = json.load(open(sys.argv[2])) if os.path.exists(sys.argv[2]) else None
if base and base["device"] in sys.argv[3]:
    print(f"\nAgainst the last measured run on a {base['device']} ({base['commit']}, {base['date']}; another lease), medians:")
    print()
    print("| benchmark | then | now | now / then |")
    print("|---|---:|---:|---:|")
    for name, bs in groups.items():
        then = base["median_us"].get(name)
        t = stat(bs, "real_time")
        if then is None or t is None or any(b.get("error_occurred") for b in bs):
            continue
        unit = {"ns": 1e-3, "us": 1, "ms": 1e3, "s": 1e6}[bs[0]["time_unit"]]
        now = t[0] * unit
        print(f"| {name} | {then:.4g} us | {now:.4g} us | {now / then:.2f} |")
PY
fi
}
table | tee "$out/table.md"
exit "$rc"
