# PyTorch's OpInfo samples as an independent oracle: every dtensor op that
# torch's op_db covers runs each sample (float32, float64, int64) on a 1-rank mesh and sharded on a
# [2, 2] thread mesh with seeded random placements, against torch's result of the same ATen op
# (tests/python/opinfo_oracle.py). What dtensor deliberately does differently: docs/OPINFO.md.
import collections
import re

import pytest

pytest.importorskip("torch", reason="torch is not installed: the OpInfo oracle needs it (scripts/setup_python.sh)")
pytest.importorskip("expecttest", reason="expecttest is not installed: torch's op_db imports it (scripts/setup_python.sh)")

import dtensor  # noqa: E402
import opinfo_oracle as oracle  # noqa: E402

# Rejections reviewed as deliberate (docs/OPINFO.md): op -> patterns of dtensor's message. A
# rejection matching none of them fails test_rejections_are_reviewed.
REVIEWED_REJECTIONS = {
    **{op: [r"has dtype int64; accepted: float32, float64", r"has dtype u?int(8|16); accepted: float32, float64"]
       for op in ("mm", "bmm", "addmm", "matmul")},
    "linear": [r"has dtype int64; accepted: float32, float64", r"has dtype u?int(8|16); accepted: float32, float64",
               r"linear\(\w+\[[\d, ]*\] \[R\], \w+\[\d+\] \[R\]\).*accepted: input\[\.\.\., in\] with weight\[out, in\]"],
    **{op: [r"pooling needs a floating dtype"] for op in (
        "avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices")},
    "index_add": [r"self must be floating, got int64", r"self must be floating, got u?int(8|16)"],
    "convolution": [r"input must be floating, got int64"],  # torch's slow CPU path takes int64; ours is floating only
    "gather": [r"index must be int64 or int32, got uint8"],  # torch takes a uint8 index when it is empty
    "upsample_bilinear2d": [r"self must be floating, got uint8"],  # torch's uint8 image kernel; ours is floating only
    "cat": [r"cat\(\w+\[0\] \[R\], .*dim 1 out of range for a 1-d tensor"],  # torch's legacy skip of 1-d empties
    "cross_entropy": [r"target must hold class indices", r"accepted: input \[N, C\] with target \[N\]"],
    "nll_loss": [r"accepted: input \[N, C\] with target \[N\]"],
    "scaled_dot_product_attention": [r"unknown argument 'enable_gqa'",
                                     r"accepted: query \[\.\.\., L, E\], key \[\.\.\."],
}

# Ops whose indices may differ from torch's among tied values only (torch leaves the choice
# unspecified there); the sharded indices still equal dtensor's 1-rank ones exactly.
TIE_DIFFERENCES = {"kthvalue", "topk"}
# The same, on samples of the narrow integer dtypes only: torch's sort without stable=True orders
# OpInfo's 8000 tied uint8/int8/int16 values otherwise than its own stable sort (its float and int64
# samples still match torch's indices exactly).
NARROW_TIE_DIFFERENCES = {"sort"}


_NARROW_TAG = re.compile(r" \[(" + "|".join(oracle.DTYPE_NAMES[d] for d in oracle.NARROW_DTYPES) + r")( [a-z ]+)?\]$")


def _narrow_sample(desc):
    """Whether run_all's description `desc` ("sort(T[8000]:uint8) [uint8 ties]") is of a NARROW_DTYPES sample."""
    return _NARROW_TAG.search(desc) is not None

# dtensor ops no OpInfo entry covers, by why.
UNCOVERED_REASON = "no OpInfo entry: a backward op, reached through autograd (tests/autograd)"
# dtensor ops with no OpInfo entry that another test checks against torch: op -> where.
OWN_TORCH_TESTS = {
    "grouped_mm": "tests/python/test_grouped_mm.py (torch._grouped_mm)",
    "flex_attention": "tests/python/test_flex_attention.py (torch's SDPA with explicit masks)",
    "create_block_mask": "tests/kernels/flex_attention_test.cc (its tile map, checked by hand)",
    # Random draws: torch's values come from another generator (mt19937 on CPU); the draws are checked
    # against one device's on every layout and by their distributions, dropout's values and gradient
    # against torch's formulas.
    "philox_rand_like": "tests/python/test_random_ops.py (one device's draw, KS test)",
    "philox_randn_like": "tests/python/test_random_ops.py (one device's draw, KS test)",
    "philox_bernoulli": "tests/python/test_random_ops.py (one device's draw, chi-square)",
    "philox_dropout": "tests/python/test_random_ops.py, test_torch_bridge.py (x * mask / (1 - p), its gradient)",
    "alias": "tests/python/test_copy_ops.py (torch.ops.aten.alias; the block is the input's memory)",
    "copy": "tests/python/test_copy_ops.py (torch.ops.aten.copy: broadcast, cast, sharded self and src)",
    # ops/metadata/: op_db has no size-query or item entries; each op against torch's answer for the
    # global tensor on Shard (uneven, empty blocks), Replicate and Partial inputs.
    **{op: "tests/python/test_metadata_ops.py (torch's size(k), stride(k), numel(), storage_offset(), "
           "is_contiguous(memory_format), item()); test_core_aten.py::test_size_queries_and_scalar_reads_are_global"
       for op in ("sym_size.int", "sym_stride.int", "sym_numel", "sym_storage_offset", "sym_is_contiguous",
                  "_local_scalar_dense")},
    "col2im": "tests/python/test_bridge_fold.py (torch's F.fold; op_db has no fold entry, and the bridge runs "
              "dtensor's col2im kernel: it is layout-dependent)",
    # ops/factory/: no tensor input, so OpInfo's samples (which start from a tensor) never reach them;
    # op_db's factory entries do, through dtensor's factories (test_opdb.py).
    **{op: "tests/python/test_factory_ops.py (torch's factories on [4] and [2, 2] meshes; the draws against "
           "their key's one-device draw); test_opdb.py's factory entries"
       for op in ("arange", "arange.start", "arange.start_step", "empty.memory_format", "empty_strided", "full",
                  "rand", "randn", "randperm", "scalar_tensor")},
}


@pytest.fixture(scope="module")
def results():
    """Every translated sample's outcome, by dtensor op (OpInfo entries that map to several ops,
    e.g. median -> median, median.dim, count under each)."""
    by_op = collections.defaultdict(list)
    for entry, outcome, desc in oracle.run_all():
        by_op[outcome.op].append((entry, outcome, desc))
    return by_op


def table(by_op):
    head = f"{'op':34} {'samples':>7} {'local':>6} {'sharded':>7} {'tie':>4} {'rejected':>8} {'skipped':>7} {'mismatch':>8}"
    lines = [f"OpInfo oracle (tests/python/test_opinfo.py; at most {oracle.MAX_SAMPLES} samples per OpInfo entry "
             "and dtype, plus variants: tied inputs for index ops, NaNs in floating inputs, Python-number operands "
             "for add/mul/div/pow):", head, "-" * len(head)]
    skipped_why = collections.Counter()
    totals = collections.Counter()
    for op in sorted(by_op):
        c = collections.Counter(o.status for _, o, _ in by_op[op])
        ran = len(by_op[op]) - c["skipped"]
        local = c["pass"] + c["tie"] + c["mismatch-sharded"]
        sharded = c["pass"] + c["tie"]
        bad = c["mismatch-local"] + c["mismatch-sharded"] + c["mismatch-grad"]
        row = dict(samples=ran, local=local, sharded=sharded, tie=c["tie"], rejected=c["rejected"],
                   skipped=c["skipped"], mismatch=bad)
        totals.update(row)
        lines.append(f"{op:34} {ran:7} {local:6} {sharded:7} {c['tie']:4} {c['rejected']:8} {c['skipped']:7} {bad:8}")
        for _, o, _ in by_op[op]:
            if o.status == "skipped":
                skipped_why[f"{op}: {o.detail}"] += 1
    lines.append("-" * len(head))
    lines.append(f"{'total':34} {totals['samples']:7} {totals['local']:6} {totals['sharded']:7} {totals['tie']:4} "
                 f"{totals['rejected']:8} {totals['skipped']:7} {totals['mismatch']:8}")
    uncovered = sorted(set(dtensor.ops.names()) - set(by_op))
    lines.append(f"not covered by OpInfo ({len(uncovered)}): {', '.join(uncovered)}")
    lines.append("skipped, by reason:")
    lines += [f"  {n:4} {why}" for why, n in sorted(skipped_why.items())]
    return "\n".join(lines)


def test_opinfo_table(results, summary):
    text = table(results)
    summary(text)  # the counts are the point of the run
    covered = [op for op in results if any(o.status != "skipped" for _, o, _ in results[op])]
    assert len(covered) >= 80, f"only {len(covered)} dtensor ops ran OpInfo samples:\n{text}"


@pytest.mark.parametrize("op", sorted(n for n in dtensor.ops.names()))
def test_op_matches_torch(results, op):
    if op not in results and op in OWN_TORCH_TESTS:
        pytest.skip(f"{op}: no OpInfo entry; checked against torch in {OWN_TORCH_TESTS[op]}")
    if op not in results:
        assert op.endswith("_backward"), f"{op}: no OpInfo sample reaches it; map it in opinfo_oracle.TRANSLATORS"
        pytest.skip(f"{op}: {UNCOVERED_REASON}")
    outcomes = results[op]
    bad = [f"{o.status}: {desc}: {o.detail}" for _, o, desc in outcomes if o.status.startswith("mismatch")]
    assert not bad, f"{op}: {len(bad)} samples differ from torch:\n" + "\n".join(bad[:20])
    ties = [desc for _, o, desc in outcomes if o.status == "tie"
            and not (op in NARROW_TIE_DIFFERENCES and _narrow_sample(desc))]
    assert not ties or op in TIE_DIFFERENCES, f"{op}: indices differ from torch's among ties:\n" + "\n".join(ties[:10])
    # An op whose every sample was skipped or rejected was not compared: a failure, not a pass.
    assert any(o.status in ("pass", "tie") for _, o, _ in outcomes), (
        f"{op}: no sample compared with torch passed: " + "; ".join(sorted({f"{o.status}: {o.detail}"[:160]
                                                                            for _, o, _ in outcomes}))[:2000])


def test_rejections_are_reviewed(results):
    unreviewed = []
    for op, outcomes in results.items():
        for _, o, desc in outcomes:
            if o.status == "rejected" and not any(re.search(p, o.detail) for p in REVIEWED_REJECTIONS.get(op, [])):
                unreviewed.append(f"{op}: {desc}: {o.detail}")
    assert not unreviewed, "dtensor rejects OpInfo samples not reviewed in docs/OPINFO.md:\n" + "\n".join(unreviewed[:30])


def test_reviewed_differences_still_occur(results):
    # A listed difference that no sample shows any more (fixed, or the sample changed) is stale.
    stale = [f"{op}: {p}" for op, pats in REVIEWED_REJECTIONS.items() for p in pats
             if not any(o.status == "rejected" and re.search(p, o.detail) for _, o, _ in results.get(op, []))]
    stale += [f"{op}: ties" for op in TIE_DIFFERENCES if not any(o.status == "tie" for _, o, _ in results.get(op, []))]
    stale += [f"{op}: ties on narrow integers" for op in NARROW_TIE_DIFFERENCES
              if not any(o.status == "tie" and _narrow_sample(d) for _, o, d in results.get(op, []))]
    assert not stale, "listed in docs/OPINFO.md but no longer seen:\n" + "\n".join(stale)


def test_native_core_aten_packets_compared_with_torch(results, summary):
    """Every native Core ATen packet (test_core_aten.native_packets: served by a registered op) but
    the backward ones is compared with torch: a sample of a registered op serving it (its own name,
    an ATen alias on its definition, or a bridge handler running it) passed here against torch's
    result, or the op has its own test against torch (OWN_TORCH_TESTS). Fails naming the packets that
    are neither. The backward packets are reached through autograd, not by samples: test_opdb's
    test_core_aten_packets_compared_with_torch requires each to be compared by op_db's gradients."""
    from test_core_aten import listed, serving_ops

    serving = serving_ops()  # packet -> registered ops serving it
    passed = {op for op, outcomes in results.items() if any(o.status in ("pass", "tie") for _, o, _ in outcomes)}
    core_native = [n for n in listed() if n in serving and not n.endswith("_backward")]
    by_samples = [n for n in core_native if serving[n] & passed]
    by_own = [n for n in core_native if n not in by_samples and serving[n] & set(OWN_TORCH_TESTS)]
    neither = [n for n in core_native if n not in by_samples and n not in by_own]
    summary(  # the test command's summary repeats this line
        f"Core ATen native packets compared with torch: {len(by_samples) + len(by_own)} of the {len(core_native)} "
        f"forward ones ({len(by_samples)} by OpInfo samples, {len(by_own)} by their own tests: {' '.join(by_own)}); "
        f"the backward ones by op_db's gradients (test_opdb.py)")
    assert not neither, f"native Core ATen packets compared with torch nowhere: {neither}"
