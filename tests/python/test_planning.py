# dtensor.plan / dtensor.export_graph (python/dtensor/planning.py): PyTorch models -> the planner.
# The Hugging Face models are built from config classes with random weights (nothing downloaded);
# their tests skip, saying so, when transformers is not installed (scripts/setup_python.sh pins it).
import json
import time

import pytest

import dtensor

torch = pytest.importorskip("torch", reason="dtensor.plan traces with torch.export: torch is not installed")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402


def _transformers():
    return pytest.importorskip(
        "transformers", reason="transformers is not installed (scripts/setup_python.sh pins it)")


def _torch_flops(model, args, kwargs):
    """FLOPs by torch's counter: mm, bmm, addmm, baddbmm, the attention kernels (2 per multiply-add)."""
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(*args, **kwargs)
    return fc.get_total_flops()


class _Mlp(torch.nn.Module):
    """Two linears around an op the planner has no rule for (roll)."""

    def __init__(self, d=16):
        super().__init__()
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return self.down(torch.roll(torch.relu(self.up(x)), shifts=1, dims=0)).sum()


def test_unknown_ops_are_listed_and_planned_replicated(tmp_path):
    model = _Mlp()
    x = torch.randn(8, 16)
    info = dtensor.export_graph(model, (x,), str(tmp_path / "mlp.json"))
    assert info["unknown_ops"] == {"roll": 1}
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert info["forward_flops"] == _torch_flops(model, (x,), {})
    graph = json.loads((tmp_path / "mlp.json").read_text())
    roll = [n for n in graph["nodes"] if n.get("op") == "opaque"]
    assert len(roll) == 1 and roll[0]["args"][1:] == [[8, 64], "float32", "roll"]

    report = dtensor.plan(model, (x,), mesh="tp=4")
    op = next(o for o in report["ops"] if o["op"] == "opaque")
    assert op["placements"]["outputs"] == ["[R]"]  # no rule: only the all-replicated row
    assert op["compute_us"] > 0  # priced as a copy of its input and output
    assert any("roll x1" in n for n in report["notes"])


class _Block(torch.nn.Module):
    """A transformer block written with the ops directly: embedding, layer_norm, matmul, split, view,
    permute, reshape, bmm, transpose, softmax, linear, gelu, mm, t, rms_norm, silu, cross_entropy."""

    def __init__(self, d=32, heads=4, vocab=64):
        super().__init__()
        self.heads = heads
        self.emb = torch.nn.Embedding(vocab, d)
        self.ln = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Parameter(torch.randn(d, 3 * d))
        self.proj = torch.nn.Linear(d, d)
        self.w2 = torch.nn.Parameter(torch.randn(d, d))
        self.rms = torch.nn.RMSNorm(d)

    def forward(self, ids, target):
        x = self.emb(ids)
        b, s, d = x.shape
        q, k, v = torch.matmul(self.ln(x), self.qkv).split(d, dim=-1)

        def heads(t):
            return t.view(b, s, self.heads, d // self.heads).permute(0, 2, 1, 3).reshape(b * self.heads, s, -1)

        a = torch.softmax(torch.bmm(heads(q), heads(k).transpose(1, 2)) * 0.5, dim=-1)
        o = torch.bmm(a, heads(v)).reshape(b, self.heads, s, -1).transpose(1, 2).reshape(b * s, d)
        o = torch.nn.functional.gelu(self.proj(o), approximate="tanh")
        o = torch.nn.functional.silu(self.rms(torch.mm(o, self.w2.t())))
        return torch.nn.functional.cross_entropy(o, target.reshape(-1), reduction="sum")


def test_common_transformer_ops_map_onto_planner_ops(tmp_path):
    model = _Block()
    ids, target = torch.randint(0, 64, (2, 8)), torch.randint(0, 32, (2, 8))
    info = dtensor.export_graph(model, (ids, target), str(tmp_path / "block.json"))
    assert info["unknown_ops"] == {}
    for op in ("embedding", "layer_norm", "matmul", "split", "permute", "bmm", "softmax", "linear", "gelu", "mm",
               "t", "rms_norm", "silu", "cross_entropy"):
        assert op in info["mapped_ops"], op
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert info["forward_flops"] == _torch_flops(model, (ids, target), {})
    assert dtensor.plan(model, (ids, target), mesh="tp=2")["totals"]["step_time_us"] > 0


class _Rows(torch.nn.Module):
    """Ops of the pointwise tables (ops/pointwise/rows.h) around a linear."""

    def __init__(self, d=16):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)

    def forward(self, x):
        h = self.lin(x)
        return torch.atan2(torch.sin(h), torch.cosh(x)).erf().sum()


def test_pointwise_row_ops_map_from_their_table(tmp_path):
    # No per-op line in _aten_ops: the mapping comes from the row (dtensor.ops.pointwise_rows()).
    info = dtensor.export_graph(_Rows(), (torch.randn(8, 16),), str(tmp_path / "rows.json"))
    assert info["unknown_ops"] == {}
    for op in ("atan2", "sin", "cosh", "erf"):
        assert op in info["mapped_ops"], op
    report = dtensor.plan(_Rows(), (torch.randn(8, 16),), mesh="tp=2")
    assert {"atan2", "sin", "cosh", "erf"} <= {o["op"] for o in report["ops"]}


def test_core_aten_ir_imports_too(tmp_path):
    # run_decompositions() lowers to core ATen: linear -> addmm, layer_norm -> native_layer_norm,
    # split -> split_with_sizes, cross_entropy -> log_softmax + gather.
    model = _Block()
    ids, target = torch.randint(0, 64, (2, 8)), torch.randint(0, 32, (2, 8))
    ep = torch.export.export(model, (ids, target)).run_decompositions()
    graph, info = dtensor.planning.graph_from_exported(ep)
    assert info["mapped_ops"]["layer_norm"] == 1 and "split_with_sizes" not in info["unknown_ops"]
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert info["forward_flops"] == _torch_flops(model, (ids, target), {})
    (tmp_path / "core.json").write_text(json.dumps(graph))
    report = json.loads(dtensor._dtensor._plan_graph_file(str(tmp_path / "core.json"), "tp=2", "h100-nvlink"))
    assert report["totals"]["step_time_us"] > 0


def test_meta_model_exports_without_memory(tmp_path):
    with torch.device("meta"):
        model = _Mlp(d=8192)  # 0.5 G parameters: 2 GB if it were materialized
        x = torch.randn(4, 8192)
    info = dtensor.export_graph(model, (x,), str(tmp_path / "big.json"))
    assert info["parameters"] == sum(p.numel() for p in model.parameters()) == 4 * 8192 * 8192 * 2 + 4 * 8192
    report = dtensor.plan(model, (x,), mesh="dp=2,tp=2")
    assert report["totals"]["param_bytes"] > 0


def test_bad_graph_files_give_clear_errors(tmp_path):
    plan_file = dtensor._dtensor._plan_graph_file
    with pytest.raises(dtensor.DTensorError, match="missing.json"):
        plan_file(str(tmp_path / "missing.json"), "tp=2", "h100-nvlink")
    bad = tmp_path / "bad.json"
    nodes = [{"name": "x", "kind": "input", "shape": [4, 8], "dtype": "float32"},
             {"name": "y", "op": "opaque", "args": [["x"], [4, -8], "float32", "flip"]}]
    bad.write_text(json.dumps({"format": "dtensor-graph/1", "nodes": nodes}))
    with pytest.raises(dtensor.DTensorError, match=r"op 'y': opaque.*shape sizes must be >= 0, not -8"):
        plan_file(str(bad), "tp=2", "h100-nvlink")
    nodes[1] = {"name": "y", "op": "opaque", "args": [["x"], [4, 8], "complex64", "flip"]}
    bad.write_text(json.dumps({"format": "dtensor-graph/1", "nodes": nodes}))
    with pytest.raises(dtensor.DTensorError, match="complex64"):
        plan_file(str(bad), "tp=2", "h100-nvlink")
    nodes[1] = {"name": "y", "op": "pad", "args": ["x", [1, 2, 3]]}
    bad.write_text(json.dumps({"format": "dtensor-graph/1", "nodes": nodes}))
    with pytest.raises(dtensor.DTensorError, match="even number of values"):
        plan_file(str(bad), "tp=2", "h100-nvlink")
    with pytest.raises(dtensor.DTensorError, match="mesh"):
        dtensor.plan(_Mlp(), (torch.randn(8, 16),), mesh="tp=four")


def test_dynamic_shapes_are_rejected_naming_the_input(tmp_path):
    model = _Mlp()
    ep = torch.export.export(model, (torch.randn(8, 16),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    with pytest.raises(dtensor.GraphImportError, match="symbolic size"):
        dtensor.planning.graph_from_exported(ep)


def _gpt2(tf):
    # A stock config (use_cache=True, transformers' default): the import traces it without the cache.
    cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32,
                        bos_token_id=0, eos_token_id=0)
    return tf.GPT2LMHeadModel(cfg)


def _llama(tf):
    cfg = tf.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128, max_position_embeddings=32)
    return tf.LlamaForCausalLM(cfg)


@pytest.mark.parametrize("build", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_hugging_face_models_import_and_plan(build, tmp_path):
    tf = _transformers()
    tf.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = build(tf).eval()
    ids = torch.randint(0, 128, (2, 16))
    kwargs = {"labels": ids}
    info = dtensor.export_graph(model, (ids,), str(tmp_path / "g.json"), kwargs)
    assert info["export_kwargs_added"] == {"use_cache": False}  # the stock config keeps a KV cache
    assert info["parameters"] == sum(p.numel() for p in model.parameters())  # tied lm_head counted once
    assert info["forward_flops"] == _torch_flops(model, (ids,), kwargs) > 0
    assert info["unknown_ops"] == {}
    graph = json.loads((tmp_path / "g.json").read_text())
    layers = {n["layer"] for n in graph["nodes"] if "layer" in n}
    assert layers == {0, 1}
    for mesh in ("tp=4", "dp=2,tp=2"):
        report = dtensor.plan(model, (ids,), mesh=mesh, example_kwargs=kwargs)
        assert report["mesh"]["shape"] == [int(d.split("=")[1]) for d in mesh.split(",")]
        assert report["templated_layers"] == 2  # the two blocks are solved once
        assert report["totals"]["step_time_us"] > 0
        ops = {o["name"] for o in report["ops"]}
        assert any(name.endswith(".weight") for name in ops)


def test_llama3_8b_size_on_meta_plans():
    tf = _transformers()
    tf.logging.set_verbosity_error()
    cfg = tf.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
                         rope_theta=500000.0)
    with torch.device("meta"):
        model = tf.LlamaForCausalLM(cfg).to(torch.bfloat16)
    ids = torch.zeros(8, 8192, dtype=torch.long, device="meta")
    # num_items_in_batch makes the loss a sum (as the Trainer does): a mean's divisor needs every
    # target, so it would be planned replicated over dp.
    kwargs = {"labels": ids, "num_items_in_batch": ids.numel()}
    t0 = time.perf_counter()
    report = dtensor.plan(model, (ids,), mesh="dp=8,tp=8", hardware="h100-nvlink", example_kwargs=kwargs)
    info = report["import"]
    print(f"\nLlama-3-8B size on meta, dp=8,tp=8: export {info['export_s']:.1f} s, search {info['search_s']:.2f} s "
          f"(planner {report['plan_time_ms']:.0f} ms), total {time.perf_counter() - t0:.1f} s; step "
          f"{report['totals']['step_time_us'] / 1e3:.1f} ms vs Megatron "
          f"{next(b for b in report['baselines'] if b['name'] == 'megatron')['step_time_us'] / 1e3:.1f} ms")
    assert info["parameters"] == 8_030_261_248
    assert info["unknown_ops"] == {}
    assert report["templated_layers"] == 32
    # The search's time (target 1 s) is printed above, not asserted: tests check results, and this
    # one shares CI's two cores with another pytest worker.
    megatron = _search_vs_megatron(report)


_LLAMA3 = {"8B": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32),
           "70B": dict(hidden_size=8192, intermediate_size=28672, num_attention_heads=64)}


def _llama3_layers(size, layers=2):
    """A Llama-3 of the real width on meta (no memory), with fewer layers: the planner solves the
    identical layers once, so each plans as at full depth."""
    tf = _transformers()
    tf.logging.set_verbosity_error()
    cfg = tf.LlamaConfig(num_hidden_layers=layers, num_key_value_heads=8, vocab_size=128256,
                         max_position_embeddings=8192, rope_theta=500000.0, **_LLAMA3[size])
    with torch.device("meta"):
        return tf.LlamaForCausalLM(cfg).to(torch.bfloat16)


def _layer_collectives(part, phase="forward"):
    return part["collectives"][phase]


def _search_vs_megatron(report):
    """The Megatron baseline, after checking that the search itself (not a baseline returned in its
    place, which would make "never slower" true by construction) is within 1% of it."""
    megatron = next(b for b in report["baselines"] if b["name"] == "megatron")
    assert megatron["valid"], megatron["note"]
    assert report["source"] == "search", report["notes"]
    assert report["search"]["step_time_us"] <= megatron["step_time_us"] * 1.01, (report["search"]["step_time_us"],
                                                                                  megatron["step_time_us"])
    return megatron


@pytest.mark.parametrize("size,mesh,batch", [("8B", "tp=8", (1, 2048)), ("70B", "tp=8", (1, 2048)),
                                             ("70B", "dp=8,tp=8", (8, 8192))])
def test_imported_llama3_layers_have_megatrons_collectives(size, mesh, batch):
    # What Hugging Face runs (RMSNorm in float32, rotary as slice/neg/cat, q/k/v as three linears,
    # views to heads) planned per layer as Megatron-LM with sequence parallelism: the norm's output
    # all-gathered once for q, k, v (and once for gate, up), o_proj's and down_proj's partial sums
    # reduce-scattered onto the sequence; never slower than the Megatron baseline.
    model = _llama3_layers(size)
    ids = torch.zeros(*batch, dtype=torch.long, device="meta")
    report = dtensor.plan(model, (ids,), mesh=mesh, example_kwargs={"labels": ids, "num_items_in_batch": ids.numel()})
    megatron = _search_vs_megatron(report)
    layer = next(p for p in report["search"]["layers"] if p["layer"] == 1)
    meg_layer = next(p for p in megatron["layers"] if p["layer"] == 1)
    sequence_parallel = {"all_gather tp": 2, "reduce_scatter tp": 2}
    two_all_reduces = {"all_reduce tp": 2}
    named = {k.replace("AG", "all_gather").replace("RS", "reduce_scatter").replace("AR", "all_reduce"): n
             for k, n in _layer_collectives(layer).items()}
    assert named in (sequence_parallel, two_all_reduces), layer["collectives"]
    assert _layer_collectives(layer) == _layer_collectives(meg_layer)


def test_llama3_8b_long_sequences_on_dp8_tp8_are_no_slower_than_megatron():
    # 8 x 8192 tokens on dp=8,tp=8: each tp group holds 8192 tokens, whose [8192, 4096] activations
    # (64 MB) outweigh the attention weights (q/k/v/o: 2 x 32 MB + 2 x 8 MB), so the cost model
    # prefers attention on the sequence-sharded stream with all-to-alls between sequence and heads
    # (DeepSpeed-Ulysses' pattern: 4 per layer forward; weights replicated over tp, their gradients
    # reduced over tp) to Megatron's column/row-parallel attention; the MLP stays Megatron's (one
    # all-gather, one reduce-scatter).
    model = _llama3_layers("8B")
    ids = torch.zeros(8, 8192, dtype=torch.long, device="meta")
    report = dtensor.plan(model, (ids,), mesh="dp=8,tp=8", example_kwargs={"labels": ids, "num_items_in_batch": ids.numel()})
    megatron = _search_vs_megatron(report)
    layer = next(p for p in report["search"]["layers"] if p["layer"] == 1)
    assert _layer_collectives(layer) == {"A2A tp": 4, "AG tp": 1, "RS tp": 1}


def test_untraceable_or_data_dependent_models_say_so():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x  # control flow on the data: torch.export cannot trace it

    with pytest.raises(dtensor.GraphImportError, match="could not trace Branchy"):
        dtensor.plan(Branchy(), (torch.randn(8),), mesh="tp=2")

    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x[x > 0]  # traced, but its size is known only from the data

    with pytest.raises(dtensor.GraphImportError, match=r"node 'index' \(index\): symbolic size u0"):
        dtensor.plan(DataDependent(), (torch.randn(8),), mesh="tp=2")


def test_layers_are_repeated_blocks_of_the_module_tree(tmp_path):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.f = torch.nn.Linear(16, 16)

        def forward(self, x):
            return self.f(x).relu()

    class EncDec(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.ModuleList([Block(), Block()])
            self.dec = torch.nn.ModuleList([Block(), Block(), Block()])
            self.head = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))

        def forward(self, x):
            for b in [*self.enc, *self.dec]:
                x = b(x)
            return self.head(x).sum()

    dtensor.export_graph(EncDec(), (torch.randn(8, 16),), str(tmp_path / "g.json"))
    layer = {n["name"]: n.get("layer", -1) for n in json.loads((tmp_path / "g.json").read_text())["nodes"]}
    # Both stacks count from 0 in the module tree; each block gets its own index. The Sequential's
    # Linear, GELU, Linear are not repeated blocks.
    assert [layer[f"{s}.{i}.f.weight"] for s, n in (("enc", 2), ("dec", 3)) for i in range(n)] == [0, 1, 2, 3, 4]
    assert layer["head.0.weight"] == layer["head.2.weight"] == -1
