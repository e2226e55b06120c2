# `dtensor plan --onnx` (planner/onnx_import.h) on models exported by torch.onnx.export. torch 2.15's
# default exporter (dynamo=True) needs onnxscript, which is not pinned; the TorchScript exporter
# (dynamo=False) needs only the onnx package (scripts/setup_python.sh pins it).
import json
import os
import subprocess

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
onnx = pytest.importorskip("onnx", reason="onnx is not installed (scripts/setup_python.sh pins it)")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DTENSOR = os.path.join(ROOT, "bazel-bin", "tools", "dtensor")


def _plan(*args):
    assert os.path.exists(DTENSOR), "build //tools:dtensor first"
    out = subprocess.run([DTENSOR, "plan", *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _export(model, args, path, **kw):
    model.eval()
    torch.onnx.export(model, args, str(path), dynamo=False, input_names=["x"], **kw)
    return path


def _graph(path, tmp_path, *extra):
    dump = tmp_path / "graph.json"
    subprocess.run([DTENSOR, "plan", "--onnx", str(path), "--dump-graph", str(dump), *extra], check=True,
                   capture_output=True, timeout=300)
    return json.loads(dump.read_text())


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


class _Mlp(torch.nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class _Attention(torch.nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.ln = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        p = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        return x + self.out((p @ v).transpose(1, 2).reshape(b, s, d))


def test_mlp_gets_megatron_column_row(tmp_path):
    model = _Mlp()
    path = _export(model, (torch.zeros(8, 64),), tmp_path / "mlp.onnx", dynamic_axes={"x": {0: "batch"}})
    # The batch dim is symbolic: it must be bound.
    out = subprocess.run([DTENSOR, "plan", "--onnx", str(path), "--mesh", "tp=4"], capture_output=True, text=True)
    assert out.returncode == 1 and "--onnx-dim batch=SIZE" in out.stderr, out.stderr
    g = _graph(path, tmp_path, "--onnx-dim", "batch=8")
    params = [n for n in g["nodes"] if n.get("kind") == "param"]
    assert sum(_numel(n["shape"]) for n in params) == sum(p.numel() for p in model.parameters())
    linears = [n for n in g["nodes"] if n.get("op") == "linear"]
    assert [n["role"] for n in linears] == ["column", "row"]
    # Matrix FLOPs: 2 * M * N * K per linear, from the weights the importer stored as [N, K].
    shapes = {n["name"]: n["shape"] for n in params}
    flops = sum(2 * 8 * _numel(shapes[n["args"][1]]) for n in linears)
    assert flops == 2 * 8 * (64 * 256 + 256 * 64)
    for mesh in ("tp=2", "tp=4"):
        report = json.loads(_plan("--onnx", str(path), "--onnx-dim", "batch=8", "--mesh", mesh, "--format", "json"))
        ops = {o["name"]: o for o in report["ops"]}
        fc1, fc2 = (ops[n["name"]] for n in linears)
        assert fc1["placements"]["inputs"][1] == "[S(0)]", fc1
        assert fc2["placements"]["inputs"][1] == "[S(1)]", fc2
        assert not any("ONNX import" in n for n in report["notes"]), report["notes"]


def test_attention_block_plans(tmp_path):
    model = _Attention()
    path = _export(model, (torch.zeros(2, 16, 64),), tmp_path / "attn.onnx")
    g = _graph(path, tmp_path)
    params = [n for n in g["nodes"] if n.get("kind") == "param"]
    assert sum(_numel(n["shape"]) for n in params) == sum(p.numel() for p in model.parameters())
    ops = [n["op"] for n in g["nodes"] if "op" in n]
    for op in ("layer_norm", "linear", "softmax", "reshape", "permute", "matmul", "split"):
        assert op in ops, (op, ops)
    assert "opaque" not in ops
    # qkv splits heads by columns; the output projection reads them split: a row linear.
    assert [n["role"] for n in g["nodes"] if n.get("op") == "linear"] == ["column", "row"]
    for mesh in ("tp=2", "tp=4"):
        report = json.loads(_plan("--onnx", str(path), "--mesh", mesh, "--format", "json"))
        assert report["totals"]["step_time_us"] > 0
        assert not any("ONNX import" in n for n in report["notes"]), report["notes"]


def test_pointwise_rows_import_by_their_onnx_name(tmp_path):
    # ONNX operators named by a row of ops/pointwise/rows.h become that op (Mod by its fmod attribute).
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Acos", ["x"], ["a"]), helper.make_node("Floor", ["a"], ["f"]),
             helper.make_node("Mod", ["f", "x"], ["r"]), helper.make_node("Mod", ["r", "x"], ["m"], fmod=1),
             helper.make_node("Erf", ["m"], ["e"]), helper.make_node("IsNaN", ["e"], ["n"]),
             helper.make_node("Not", ["n"], ["y"])]
    graph = helper.make_graph(nodes, "rows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.BOOL, [8, 16])])
    path = tmp_path / "rows.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    ops = [n["op"] for n in _graph(path, tmp_path)["nodes"] if "op" in n]
    assert ops == ["acos", "floor", "remainder", "fmod", "erf", "isnan", "logical_not"], ops


def test_every_onnx_name_on_an_op_is_an_onnx_operator(tmp_path):
    # OpDef::onnx (where each op is defined) is the importer's table: each name must be an operator
    # of the ONNX library's default domain, and importing it with the op's tensor inputs gives the op.
    import dtensor
    from onnx import TensorProto, helper

    table = dtensor.ops.onnx()
    assert {"add", "relu", "acos", "logical_and"} <= set(table)
    unknown = [(op, o) for op, names in table.items() for o in names if not onnx.defs.has(o)]
    assert not unknown, unknown
    # Add, then Relu, then Max: one node each, imported as the ops that name them.
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Max", ["r", "x"], ["y"])]
    graph = helper.make_graph(nodes, "facts", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 16])])
    path = tmp_path / "facts.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert [n["op"] for n in _graph(path, tmp_path)["nodes"] if "op" in n] == ["add", "relu", "maximum"]
