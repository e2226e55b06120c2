# dtensor.parallelize_plan / dtensor.apply_plan (python/dtensor/apply.py): a plan PyTorch applies.
# The Hugging Face models are planned at a deployment size on the meta device (at 64 wide the
# planner rightly replicates everything: latency beats bandwidth) and the plan, keyed by module
# names, is applied to the same architecture at 64 wide with random weights, on 4 Gloo CPU
# processes (tests/python/apply_plan_ranks.py), and compared with one device.
import json
import os
import subprocess
import sys

import pytest

import dtensor

torch = pytest.importorskip("torch", reason="apply_plan uses torch.distributed.tensor: torch is not installed")

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [("llama", "tp=4"), ("gpt2", "tp=4"), ("llama", "dp=2,tp=2"), ("gpt2", "dp=2,tp=2")]


def _transformers():
    tf = pytest.importorskip("transformers", reason="transformers is not installed (scripts/setup_python.sh pins it)")
    tf.logging.set_verbosity_error()
    return tf


def _plan(arch, mesh):
    """dtensor.plan of a 2-layer, 4096-wide model on meta, batch 1 x 2048, loss summed."""
    tf = _transformers()
    if arch == "llama":
        cfg = tf.LlamaConfig(num_hidden_layers=2, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                             num_key_value_heads=8, vocab_size=32000, max_position_embeddings=2048, use_cache=False)
        cls = tf.LlamaForCausalLM
    else:
        cfg = tf.GPT2Config(n_layer=2, n_embd=4096, n_head=32, vocab_size=50304, n_positions=2048, use_cache=False,
                            bos_token_id=0, eos_token_id=0)
        cls = tf.GPT2LMHeadModel
    with torch.device("meta"):
        model = cls(cfg)
    ids = torch.zeros(1, 2048, dtype=torch.long, device="meta")
    return dtensor.plan(model, (ids,), mesh=mesh, example_kwargs={"labels": ids, "num_items_in_batch": ids.numel()})


@pytest.fixture(scope="module")
def reports():
    return {case: _plan(*case) for case in CASES}


@pytest.fixture(scope="module")
def applied(reports, tmp_path_factory):
    """Every case on one torchrun of 4 processes: {(arch, mesh): {"errors", "placements"}}."""
    d = tmp_path_factory.mktemp("apply")
    args = []
    for (arch, mesh), report in reports.items():
        path = d / f"{arch}_{mesh}.json"
        path.write_text(json.dumps(dtensor.parallelize_plan(report, json_form=True)))
        args += [arch, str(path), mesh]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(HERE, "..", "..", "python"),
                                                                    os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
           os.path.join(HERE, "apply_plan_ranks.py"), str(d / "result.json"), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return {tuple(k.split(" ")): v for k, v in json.loads((d / "result.json").read_text()).items()}


@pytest.mark.parametrize("case", CASES, ids=[f"{a}-{m}" for a, m in CASES])
def test_applied_plan_matches_one_device(case, applied, reports):
    result = applied[case]
    grads = {k: v for k, v in result["errors"].items() if not k.endswith(" after AdamW")}
    steps = {k: v for k, v in result["errors"].items() if k.endswith(" after AdamW")}
    worst = max(grads, key=grads.get)
    assert grads[worst] <= 1e-5, f"{worst}: relative error {grads[worst]:.2e} (float32)"
    assert len(grads) == len(steps) + 1 == len(result["placements"]) + 1  # logits, every gradient, every step
    worst = max(steps, key=steps.get)
    assert steps[worst] <= 1e-3, f"{worst}: off by {steps[worst]:.2e} of the step size"
    assert result["grad_placements"] == {n: p for n, p in result["placements"].items() if p != "plain"}
    # The plan is applied, not only replicated: what the planner shards is sharded on the tp mesh.
    plan = dtensor.parallelize_plan(reports[case], json_form=True)
    sharded = [n for n, p in result["placements"].items() if p != ["R"]]
    assert plan["styles"] or plan["params"]
    for name in plan["params"]:
        assert result["placements"][name] == plan["params"][name], name  # torch prints Shard(1) as S(1)
    split = [m for m, st in plan["styles"].items() if st["style"] != "SequenceParallel"]  # SP: weights replicated
    assert len(sharded) >= len(plan["params"]) + len(split)


def test_llama_tp4_styles(reports):
    report = reports[("llama", "tp=4")]
    plan = dtensor.parallelize_plan(report, json_form=True)
    styles = {path.split(".", 3)[-1]: s["style"] for path, s in plan["styles"].items() if ".layers.0." in path}
    # Megatron's column-parallel q/k/v and gate/up, row-parallel o_proj and down_proj, both norms on
    # the sequence-sharded residual stream (sequence parallelism): the norm's output is gathered once
    # for q, k and v (see docs/PYTHON.md "Applying a plan").
    assert styles == {"mlp.gate_proj": "ColwiseParallel", "mlp.up_proj": "ColwiseParallel",
                      "mlp.down_proj": "RowwiseParallel", "self_attn.o_proj": "RowwiseParallel",
                      "self_attn.q_proj": "ColwiseParallel", "self_attn.k_proj": "ColwiseParallel",
                      "self_attn.v_proj": "ColwiseParallel", "input_layernorm": "SequenceParallel",
                      "post_attention_layernorm": "SequenceParallel"}
    megatron = next(b for b in report["baselines"] if b["name"] == "megatron")
    assert megatron["valid"] and report["source"] == "search"
    assert report["search"]["step_time_us"] <= megatron["step_time_us"] * 1.01
    assert plan["styles"]["model.layers.0.mlp.gate_proj"] == {"style": "ColwiseParallel", "input_layouts": "R",
                                                             "output_layouts": "S(2)"}
    assert plan["inputs"] == {"input_ids": "S(1)", "labels": "R"}
    assert plan["styles"]["model.norm"] == {"style": "SequenceParallel", "sequence_dim": 1}
    assert plan["params"] == {}  # the norms' weights are replicated, as SequenceParallel has them


def _report(w, x, bias=None, mesh=("tp", 4)):
    """A minimal dtensor.plan report: one linear `f` with weight placement w and input placement x."""
    ops = [{"name": "f.weight", "op": "param", "placements": {"inputs": [], "outputs": [w]}},
           {"name": "x", "op": "input", "placements": {"inputs": [], "outputs": [x]}},
           {"name": "f.linear", "op": "linear", "placements": {"inputs": [x, w] + ([bias] if bias else []),
                                                               "outputs": ["[P(sum)]"]}},
           {"name": "relu", "op": "relu", "placements": {"inputs": ["[R]"], "outputs": ["[R]"]}}]
    if bias:
        ops.insert(1, {"name": "f.bias", "op": "param", "placements": {"inputs": [], "outputs": [bias]}})
    modules = {"f": {"kind": "linear", "op": "f.linear", "weight": "f.weight", "bias": "f.bias" if bias else None,
                     "input": 0, "consumers": [["relu", 0]]}}
    return {"mesh": {"names": [mesh[0]], "shape": [mesh[1]]}, "ops": ops, "import": {"modules": modules}}


def test_parallelize_plan_mapping_rules():
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import RowwiseParallel

    plan = dtensor.parallelize_plan(_report("[S(1)]", "[S(1)]", "[R]"))
    style = plan["styles"]["f"]
    assert isinstance(style, RowwiseParallel) and not style.use_local_output
    assert style.input_layouts == (Shard(1),) and style.output_layouts == (Replicate(),)  # Partial reduced
    assert plan["params"] == {} and plan["inputs"] == {"x": Shard(1)}
    assert json.loads(json.dumps(dtensor.parallelize_plan(_report("[S(1)]", "[S(1)]"), json_form=True)))["styles"] \
        == {"f": {"style": "RowwiseParallel", "input_layouts": "S(1)", "output_layouts": "R"}}
    # Weight S(0) with a batch-sharded input is no ParallelStyle: explicit placements, and a note.
    plan = dtensor.parallelize_plan(_report("[S(0)]", "[S(0)]", "[S(0)]"), json_form=True)
    assert plan["styles"] == {} and plan["params"] == {"f.weight": ["S(0)"], "f.bias": ["S(0)"]}
    assert any("module f (linear): weight S(0), bias S(0), input S(0) match no ParallelStyle" in n
               for n in plan["notes"])
    with pytest.raises(ValueError, match=r"axes \['pp'\] are not supported"):
        dtensor.parallelize_plan(_report("[R]", "[R]", mesh=("pp", 4)))
    with pytest.raises(ValueError, match="plain data parallelism"):
        dtensor.parallelize_plan(_report("[R]", "[S(0)]", mesh=("dp", 4)))
    with pytest.raises(ValueError, match="needs a report from dtensor.plan"):
        dtensor.parallelize_plan({"mesh": {"shape": [4]}, "ops": []})


class _Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.emb.weight  # tied, as GPT-2's lm_head

    def forward(self, ids):
        return self.head(self.emb(ids)).sum()


def test_apply_plan_on_one_process():
    """Single-rank checks (a 1-process Gloo group): tied weights follow a styled module's new
    parameter; errors name what the model lacks."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.experimental import implicit_replication

    if not dist.is_gloo_available():
        pytest.skip("torch.distributed has no Gloo backend")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("tp",))
        model = _Tied()
        col = {"style": "ColwiseParallel", "input_layouts": "R", "output_layouts": "S(1)"}
        plan = {"tp": "tp", "dp": None, "styles": {"emb": col}, "params": {}, "inputs": {"ids": "R"}}
        dtensor.apply_plan(model, plan, mesh)
        assert model.head.weight is model.emb.weight and isinstance(model.emb.weight, DTensor)
        assert model.emb.weight.placements == (Shard(1),)
        with implicit_replication():
            model(ids=torch.arange(4)).backward()
        assert model.emb.weight.grad.placements == (Shard(1),)

        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        plan = {"tp": "tp", "dp": None, "styles": {"1": col}, "params": {}, "inputs": {}}
        with pytest.raises(ValueError, match="module 1 is a ReLU; Colwise/RowwiseParallel accept nn.Linear"):
            dtensor.apply_plan(model, plan, mesh)
        plan["styles"] = {"2": col}
        with pytest.raises(ValueError, match=r"the plan names \['2'\], which Sequential does not have"):
            dtensor.apply_plan(model, plan, mesh)
    finally:
        dist.destroy_process_group()
