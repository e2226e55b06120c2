# Valid but extreme inputs to the `dtensor` command, each in its own process under a memory and a
# time limit. The byte-mutation fuzzers (tests/fuzz) mostly exercise the parsers (about 95% of their
# inputs are rejected there); a hand-run hostile probe of 105 well-formed inputs found 21 failures.
# These inputs parse: high tensor ranks on many mesh dims, nesting at and past the bound, every zoo
# model on several meshes and depths, long chains and wide fan-outs, ONNX window attributes, and
# flag values (nan, +-inf, 0, huge). A finding is: a signal, an exit status other than 0, 1 or 2,
# more than LIMIT_S seconds, a bad_alloc, or a peak RSS above LIMIT_RSS. The counts (accepted,
# rejected with an error, findings) are printed and recorded in docs/RELIABILITY.md.
import json
import os
import resource
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DTENSOR = os.path.join(ROOT, "bazel-bin", "tools", "dtensor")
LIMIT_S = 10.0
LIMIT_AS = 16 << 30   # address space: threads and allocator arenas reserve far more than they touch
LIMIT_RSS = 2 << 30   # a gigabyte-scale allocation for one request is a finding


def _limits():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run(args, stdin=None):
    """(outcome, detail): outcome is 'accepted', 'rejected' or 'finding'. The child is waited for with
    wait4, which gives its own peak RSS."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as inp:
        if stdin is not None:
            inp.write(stdin.encode())
            inp.seek(0)
        p = subprocess.Popen([DTENSOR] + args, stdin=inp if stdin is not None else subprocess.DEVNULL, stdout=out,
                             stderr=subprocess.STDOUT, preexec_fn=_limits)
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > LIMIT_S:
                p.kill()
                os.wait4(p.pid, 0)
                p.returncode = -9  # reaped here: Popen must not wait for it again
                return "finding", f"over {LIMIT_S:.0f} s"
            time.sleep(0.005)
        rc = p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    seconds = time.monotonic() - t0
    last = text.strip().splitlines()[-1][:200] if text.strip() else ""
    if rc < 0:
        return "finding", f"signal {-rc}: {last}"
    if rc not in (0, 1, 2):
        return "finding", f"exit {rc}: {last}"
    if "bad_alloc" in text or "internal error" in text:
        return "finding", last
    if usage.ru_maxrss * 1024 > LIMIT_RSS:
        return "finding", f"peak RSS {usage.ru_maxrss >> 10} MB"
    if seconds > LIMIT_S:
        return "finding", f"{seconds:.1f} s"
    if rc != 0 or '"error"' in text:
        return "rejected", last or f"exit {rc}"
    return "accepted", ""


def explain(request):
    return ["explain"], json.dumps(request) + "\n"


def cases(tmp):
    out = []
    # High ranks on many mesh dims (bounded by rows, tables and limits), several ops.
    for rank in (1, 4, 8, 12, 16, 20, 40, 64, 65):
        for dims in (1, 2, 3, 4, 6, 7):
            for op in ("relu", "add", "sum", "softmax"):
                args = [{"shape": [2] * rank}] + ([{"shape": [2] * rank}] if op == "add" else [])
                req = {"op": op, "mesh": [2] * dims, "args": args}
                if op == "softmax":
                    req["kwargs"] = {"dim": rank - 1}
                out.append((f"explain {op} rank {rank} mesh [2]^{dims}", explain(req)))
    # run: true at the budget's edges.
    for n in (1 << 10, 1 << 20, 1 << 26):
        out.append((f"explain run mm {n}", explain({"op": "mm", "mesh": [2], "run": True,
                                                    "args": [{"shape": [n, 64]}, {"shape": [64, 64]}]})))
        out.append((f"explain run sdpa {n}", explain({"op": "scaled_dot_product_attention", "mesh": [2], "run": True,
                                                      "args": [{"shape": [1, 1, n, 8]}] * 3})))
    # Nesting at, just past and far past the bound, in every field.
    for depth in (63, 64, 65, 10000, 200000):
        nested = "[" * depth + "]" * depth
        for field in ("mesh", "args", "kwargs", "shape"):
            if field == "shape":
                line = '{"op":"relu","mesh":[2],"args":[{"shape":' + nested + '}]}'
            else:
                line = '{"op":"relu","' + field + '":' + nested + '}'
            out.append((f"explain nesting {depth} in {field}", (["explain"], line + "\n")))
    # Every zoo model on several meshes and depths.
    for model in ("gpt2", "gpt2-xl", "llama3-8b", "llama3-70b", "mixtral-8x7b", "vit-l16", "resnet50"):
        for mesh in ("tp=8", "dp=2,tp=4", "dp=2,fsdp=2,tp=2", "a=2,b=2,c=2,d=2"):
            for layers in ("1", "33"):
                out.append((f"plan {model} {mesh} layers {layers}",
                            (["plan", "--model", model, "--mesh", mesh, "--layers", layers, "--memory-limit", "1e6"],
                             None)))
    # Graph sizes: long chains and a wide fan-out (one tensor read by many ops).
    for n in (10000, 100000):
        nodes = [{"name": "x", "kind": "input", "shape": [8, 16]}]
        nodes += [{"name": f"r{i}", "op": "relu", "args": [f"r{i - 1}" if i else "x"]} for i in range(n)]
        path = os.path.join(tmp, f"chain{n}.json")
        json.dump({"nodes": nodes}, open(path, "w"))
        out.append((f"plan chain {n}", (["plan", "--graph", path, "--mesh", "tp=2", "--no-compare"], None)))
    for n in (1000, 20000):
        nodes = [{"name": "x", "kind": "input", "shape": [8, 16]}]
        nodes += [{"name": f"r{i}", "op": "relu", "args": ["x"]} for i in range(n)]
        path = os.path.join(tmp, f"fan{n}.json")
        json.dump({"nodes": nodes}, open(path, "w"))
        out.append((f"plan fan-out {n}", (["plan", "--graph", path, "--mesh", "tp=2", "--no-compare"], None)))
    # Flag values.
    for v in ("nan", "inf", "-inf", "0", "-1", "1e308", "9223372036854775808", "1e-300"):
        for flag in ("--lr", "--dim", "--steps", "--batch", "--seq", "--timeout", "--moe-aux-coef"):
            out.append((f"train {flag} {v}", (["train", "--steps", "1", "--sample", "0", flag, v], None)))
        for flag in ("--batch", "--seq", "--memory-limit", "--layers"):
            out.append((f"plan {flag} {v}", (["plan", "--model", "gpt2", "--mesh", "tp=2", flag, v], None)))
        for flag in ("--timeout", "--kill-grace", "--failure-grace"):
            out.append((f"launch {flag} {v}", (["launch", "-n", "1", flag, v, "--", "true"], None)))
        out.append((f"explain --max-run-flops {v}", (["explain", "--max-run-flops", v], "")))
    return out


def onnx_cases(tmp):
    """ONNX Conv, MaxPool and AveragePool with zero, negative and huge window attributes."""
    onnx = pytest.importorskip("onnx")  # installed by scripts/setup_python.sh with torch
    helper, TensorProto = onnx.helper, onnx.TensorProto
    out = []
    for op in ("Conv", "MaxPool", "AveragePool"):
        for attr in ("strides", "pads", "dilations", "kernel_shape"):
            if op == "AveragePool" and attr == "dilations":
                continue
            for v in (0, -1, 1, 3, 1 << 31, 1 << 62):
                attrs = {"kernel_shape": [3, 3]} if op != "Conv" else {}
                attrs[attr] = [v] * (4 if attr == "pads" else 2)
                inputs = ["x", "w"] if op == "Conv" else ["x"]
                node = helper.make_node(op, inputs, ["y"], name="y", **attrs)
                inits = [helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], [0.0] * 108)] if op == "Conv" else []
                g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
                m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
                path = os.path.join(tmp, f"{op}-{attr}-{v}.onnx")
                open(path, "wb").write(m.SerializeToString())
                out.append((f"plan --onnx {op} {attr}={v}", (["plan", "--onnx", path, "--mesh", "tp=2"], None)))
    return out


def check_all(make_cases, what):
    assert os.access(DTENSOR, os.X_OK), f"{DTENSOR} is missing: bazel build //tools:dtensor"
    counts = {"accepted": 0, "rejected": 0, "finding": 0}
    findings = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="extreme-") as tmp:
        all_cases = make_cases(tmp)
        for name, (args, stdin) in all_cases:
            outcome, detail = run(args, stdin)
            counts[outcome] += 1
            if outcome == "finding":
                findings.append(f"{name}: {detail}")
    total = len(all_cases)
    print(f"\n{what}: {total} in {time.monotonic() - t0:.0f} s: {counts['accepted']} accepted "
          f"({100 * counts['accepted'] / total:.0f}%), {counts['rejected']} rejected with an error, "
          f"{counts['finding']} findings (limits: {LIMIT_S:.0f} s, {LIMIT_RSS >> 30} GB RSS)")
    for f in findings:
        print("  finding:", f)
    assert not findings, "\n".join(findings)


def test_valid_but_extreme_inputs_end_within_limits():
    check_all(cases, "extreme inputs")


def test_extreme_onnx_window_attributes_end_within_limits():
    check_all(onnx_cases, "extreme ONNX attributes")
