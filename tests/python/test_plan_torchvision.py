# dtensor.plan on torchvision's ResNet-50 and ViT-B/16, models no one here wrote, built on `meta`
# (random-weight constructors: nothing is downloaded, nothing is allocated). The imported graph is
# checked against the model itself: its parameter count against sum(p.numel()), its forward FLOPs
# against torch.utils.flop_counter on the same forward. Skips, saying so, when torchvision is not
# installed (scripts/setup_python.sh pins it).
import json

import math

import pytest

import dtensor

torch = pytest.importorskip("torch", reason="dtensor.plan traces with torch.export: torch is not installed")
torchvision = pytest.importorskip(
    "torchvision", reason="torchvision is not installed (scripts/setup_python.sh pins it, with --no-deps)")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

BATCH = 64  # 8 images per rank on dp=8: with 1, the planner rather splits channels


def _torch_flops(model, args):
    """flop_counter's count: convolutions and matrix products (mm, addmm, bmm, the attention
    kernels), 2 per multiply-add, bias adds and everything else 0."""
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(*args)
    return fc.get_total_flops()


def _on_meta(build, training=True):
    with torch.device("meta"):
        model = build()
        x = torch.randn(BATCH, 3, 224, 224)
    return model.train(training), x


# model -> (the planner ops its graph maps onto, its repeated blocks, of which the templated ones:
# ResNet-50's 16 bottlenecks, 12 of them in the 4 stages' runs of equal blocks (the first of each
# stage downsamples); ViT-B/16's 12 encoder blocks).
MODELS = {
    "resnet50": (torchvision.models.resnet50,
                 {"convolution": 53, "batch_norm": 53, "relu": 49, "add": 16, "max_pool2d_with_indices": 1,
                  "adaptive_avg_pool2d": 1, "flatten": 1, "linear": 1}, 16, 12),
    "vit_b_16": (torchvision.models.vit_b_16,
                 {"convolution": 1, "cat": 1, "expand": 1, "layer_norm": 25, "linear": 49,
                  "scaled_dot_product_attention": 12, "gelu": 12, "add": 25}, 12, 12),
}


@pytest.mark.parametrize("name", MODELS)
def test_imported_graph_counts_the_models_parameters_and_flops(name, tmp_path):
    build, ops, layers, _ = MODELS[name]
    model, x = _on_meta(build)
    info = dtensor.export_graph(model, (x,), str(tmp_path / "g.json"))
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert info["parameters"] == {"resnet50": 25_557_032, "vit_b_16": 86_567_656}[name]  # torchvision's docs
    assert info["forward_flops"] == _torch_flops(model, (x,)) > 0
    assert info["unknown_ops"] == {}  # every op has a planner rule
    for op, n in ops.items():
        assert info["mapped_ops"].get(op) == n, (op, info["mapped_ops"])
    graph = json.loads((tmp_path / "g.json").read_text())
    assert {n["layer"] for n in graph["nodes"] if "layer" in n} == set(range(layers))
    bn = [n for n in graph["nodes"] if n.get("op") == "batch_norm"]
    assert all(n["args"][3] is True for n in bn)  # train(): batch statistics


@pytest.mark.parametrize("mesh", ["dp=8", "dp=2,tp=4"])
@pytest.mark.parametrize("name", MODELS)
def test_models_plan_on_data_and_tensor_parallel_meshes(name, mesh):
    build, _, _, templated = MODELS[name]
    model, x = _on_meta(build)
    report = dtensor.plan(model, (x,), mesh=mesh, hardware="h100-nvlink")
    assert report["mesh"]["shape"] == [int(d.split("=")[1]) for d in mesh.split(",")]
    assert report["import"]["unknown_ops"] == {}
    assert not any("without a planner rule" in n for n in report.get("notes", []))
    assert report["templated_layers"] == templated
    assert report["totals"]["step_time_us"] > 0 and report["totals"]["compute_us"] > 0
    ops = [o for o in report["ops"] if o["kind"] == "op"]
    assert len(ops) == sum(report["import"]["mapped_ops"].values())
    if name == "resnet50":
        # Batch statistics over a split batch or spatial dim are SyncBatchNorm's: such a batch_norm
        # all-reduces its per-channel sum and sum of squares (float32: 8 bytes a channel) once per
        # phase over the group of exactly the mesh dims that split them (a channel split needs none).
        # A group of several mesh dims is one all-reduce, reported under the first of them; its
        # bytes (ring: 2(n-1)/n of the buffer) tell the group's size n.
        dims = [d.split("=")[0] for d in mesh.split(",")]
        sizes = dict(d.split("=") for d in mesh.split(","))
        synced = 0
        for o in ops:
            if o["op"] != "batch_norm":
                continue
            x = o["placements"]["inputs"][0].strip("[]").split(", ")
            split = {dims[i] for i, p in enumerate(x) if p.startswith("S(") and p != "S(1)"}
            steps = [c for c in o["collectives"] if c["what"] == "step"]
            if not split:
                assert not steps, o
                continue
            n = math.prod(int(sizes[d]) for d in split)
            channels = model.get_submodule(o["name"].rsplit(".", 1)[0]).num_features
            assert sorted(c["phase"] for c in steps) == ["backward", "forward"], o
            for c in steps:
                assert c["kind"] == "all_reduce" and c["mesh_dim_name"] in split, o
                assert c["bytes"] == pytest.approx(2 * (n - 1) / n * 8 * channels), o
            synced += 1
        assert synced  # at 8 images per rank, most batch norms are planned with the batch split


def test_resnet_in_eval_mode_uses_running_statistics():
    model, x = _on_meta(torchvision.models.resnet50, training=False)
    report = dtensor.plan(model, (x,), mesh="dp=8")
    bn = [o for o in report["ops"] if o["op"] == "batch_norm"]
    assert len(bn) == 53
    assert not any(c["what"] == "step" for o in bn for c in o["collectives"])  # no statistics to synchronize


def test_core_aten_ir_of_the_models_imports_too():
    # run_decompositions() lowers batch_norm to _native_batch_norm_legit_functional, conv2d to
    # convolution, max_pool2d to max_pool2d_with_indices, adaptive_avg_pool2d to mean, and ViT's
    # attention to bmm and softmax with a guard for fully masked rows (eq with a number, any,
    # logical_not): logical_not is a pointwise row (ops/pointwise/rows.h), any a reduction bound by
    # its schema; eq.Scalar (a number where the op takes a tensor) stays opaque, planned replicated.
    for build, unknown in ((torchvision.models.resnet50, {}),
                           (torchvision.models.vit_b_16, {"eq": 12})):
        model, x = _on_meta(build)
        ep = torch.export.export(model, (x,)).run_decompositions()
        graph, info = dtensor.planning.graph_from_exported(ep)
        assert info["unknown_ops"] == unknown
        assert info["parameters"] == sum(p.numel() for p in model.parameters())
        assert info["forward_flops"] == _torch_flops(model, (x,))


class _Convs(torch.nn.Module):
    """Convolution and pooling forms beyond the two models': 1-d and 3-d, padding='same' (even and
    odd totals), groups, stride, dilation, a transposed convolution, avg and max pooling."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv1d(4, 8, 3, padding="same")
        self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, dilation=2, groups=4, bias=False)
        self.c3 = torch.nn.Conv2d(8, 6, 4, padding="same")  # ATen pads 1 before and 2 after
        self.ct = torch.nn.ConvTranspose2d(6, 4, 3, stride=2)
        self.c4 = torch.nn.Conv3d(4, 2, (1, 3, 3), padding=(0, 1, 1))

    def forward(self, x):
        y = self.c1(x).relu_().view(2, 8, 4, 8).repeat(1, 1, 4, 2)
        y = torch.nn.functional.avg_pool2d(self.c2(y), 2)
        y = torch.nn.functional.max_pool2d(self.ct(self.c3(y)), 2)
        return self.c4(y.unsqueeze(2)).sum()


# torch's own warning, for c3's uneven padding.
@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_convolution_forms_and_their_flops(tmp_path):
    model, x = _Convs(), torch.randn(2, 4, 32)
    info = dtensor.export_graph(model, (x,), str(tmp_path / "g.json"))
    # An uneven 'same' padding and transposed convolutions have no planner rule (its convolution
    # pads symmetrically, and takes transposed=False); repeat has one (ops/view/copy_rules.cc).
    assert info["unknown_ops"] == {"conv2d": 1, "conv_transpose2d": 1}
    assert info["mapped_ops"]["repeat"] == 1
    assert info["mapped_ops"]["convolution"] == 3
    assert info["mapped_ops"]["avg_pool2d"] == info["mapped_ops"]["max_pool2d_with_indices"] == 1
    assert info["forward_flops"] == _torch_flops(model, (x,)) > 0  # the opaque ones counted too
    graph = json.loads((tmp_path / "g.json").read_text())
    conv = {n["name"]: n for n in graph["nodes"] if n.get("op") == "convolution"}
    assert conv["c1.conv1d"]["args"][3:] == [[1], [1], [1], False, [0], 1]  # 'same', k=3: 1 each side
    assert conv["c2.conv2d"]["args"][2] is None and conv["c2.conv2d"]["args"][3:] == [
        [2, 2], [0, 0], [2, 2], False, [0, 0], 4]
    # The planner computes each output shape from the arguments and checks it against the traced
    # one (the "shapes" field): planning succeeds only when every translation is right.
    report = json.loads(dtensor._dtensor._plan_graph_file(str(tmp_path / "g.json"), "tp=2", "h100-nvlink"))
    assert report["totals"]["step_time_us"] > 0


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_a_wrongly_translated_argument_is_caught_by_the_traced_shape(tmp_path):
    model, x = _Convs(), torch.randn(2, 4, 32)
    dtensor.export_graph(model, (x,), str(tmp_path / "g.json"))
    graph = json.loads((tmp_path / "g.json").read_text())
    conv = next(n for n in graph["nodes"] if n.get("name") == "c1.conv1d")
    conv["args"][4] = [0]  # padding 0 instead of 'same''s 1: the output would be 30 long, not 32
    (tmp_path / "g.json").write_text(json.dumps(graph))
    with pytest.raises(dtensor.DTensorError, match=r"'c1.conv1d': output 0 has shape \[2, 8, 30\].*traced \[2,8,32\]"):
        dtensor._dtensor._plan_graph_file(str(tmp_path / "g.json"), "tp=2", "h100-nvlink")
