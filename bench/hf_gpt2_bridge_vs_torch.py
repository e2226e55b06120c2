"""A transformers training step through dtensor.bridge against PyTorch DTensor, same plan.

    bazel build //python/... && python3 bench/hf_gpt2_bridge_vs_torch.py [--model gpt2|llama] [--ranks 2] [--steps 8] [--runs 5]
    python3 bench/hf_gpt2_bridge_vs_torch.py --check-only [--check-steps 5] [--model llama]   # tests/python

--model llama: LlamaForCausalLM (4 layers, dim 256, 8 heads over 4 key/value heads, SwiGLU 512,
eager attention, no dropout), q/k/v/gate/up column-parallel and o/down row-parallel; on the
PyTorch side torch's own parallelize_module with DTensors between modules (use_local_output False)
and every other parameter a replicated DTensor (clip_grad_norm_ refuses a mix). The float64 check
keeps Llama's RMSNorm and softmax in float64 on both sides (float64_llama). The rest of this text
describes the default, GPT-2:

Both sides: GPT2LMHeadModel from one config with random weights (seed 0, nothing downloaded),
eager attention, its default dropout (0.1) on, transformers' own loss, clip_grad_norm_(1.0) and
torch.optim.AdamW's default implementation (on CPU its per-parameter loop: torch picks foreach
for CUDA tensors only), on `--ranks` Gloo processes started by
torchrun (one compute thread per rank when ranks >= cores, torchrun's policy, on both sides).
The plan is Megatron's for GPT-2 on both sides: c_attn and mlp.c_fc column-parallel, attn.c_proj
and mlp.c_proj row-parallel, every other parameter replicated; input ids replicated.
- bridge: `bridge.parallelize_module` with torch's ColwiseParallel/RowwiseParallel (it takes
  transformers' Conv1D);
- PyTorch DTensor: the same placements put on the parameters by `distribute_tensor` (torch's
  parallelize_module refuses Conv1D), the row-parallel outputs all-reduced by a forward hook as
  RowwiseParallel does (torch's in-place dropout refuses a Partial input), every parameter a
  DTensor (as the optimizer's foreach and fused paths need), and transformers' plain-tensor masks and position ids taken
  as replicated under `implicit_replication()`.
Each run times `--steps` steps after 2 untimed ones (forward, backward, clip, AdamW, the loss read
back); the sides alternate run by run; tokens/s per run, median (min-max) over the runs, and the
bridge / PyTorch ratio taken within each pair of runs. Before timing, both sides train
`--check-steps` steps (default 3) in float64 with dropout 0 from the same weights and batches:
every loss and every parameter after the last step must agree within CHECK_RTOL (the same
semantics; they differ only in summation order). The check's loss is cross-entropy in float64
(transformers' own loss computes in float32, which would round the two sides apart).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CONFIG = dict(vocab_size=512, n_positions=128, n_embd=256, n_layer=4, n_head=8, bos_token_id=0, eos_token_id=0)
BATCH, SEQ = 4, 128
CHECK_RTOL = 1e-9  # float64: summation order alone moves a loss by ~1e-15 per step
COL = ("attn.c_attn", "mlp.c_fc")
ROW = ("attn.c_proj", "mlp.c_proj")
LLAMA = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=4, max_position_embeddings=128)
LLAMA_COL = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
LLAMA_ROW = ("self_attn.o_proj", "mlp.down_proj")
MODEL = os.environ.get("DTENSOR_BENCH_MODEL", "gpt2")  # set by --model for the workers


def build(dropout, dtype):
    import torch
    import transformers

    torch.manual_seed(0)
    if MODEL == "llama":  # grouped-query attention (8 heads, 4 key/value heads), RoPE, SwiGLU
        cfg = transformers.LlamaConfig(**LLAMA, attn_implementation="eager")
        return transformers.LlamaForCausalLM(cfg).to(dtype).train()
    cfg = transformers.GPT2Config(**CONFIG, attn_implementation="eager",
                                  **({} if dropout else dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)))
    return transformers.GPT2LMHeadModel(cfg).to(dtype).train()


def plan_styles():
    """Megatron's plan in torch's ParallelStyle objects."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if MODEL == "llama":
        col, row, prefix = LLAMA_COL, LLAMA_ROW, "model.layers.*."
    else:
        col, row, prefix = COL, ROW, "transformer.h.*."
    plan = {prefix + n: ColwiseParallel() for n in col}
    plan.update({prefix + n: RowwiseParallel() for n in row})
    return plan


def parallel_bridge(model, world):
    import dtensor

    mesh = dtensor.init_device_mesh("cpu", (world,))
    model = dtensor.bridge.parallelize_module(model, mesh, plan_styles())
    return model, lambda ids: dtensor.distribute_tensor(ids, mesh), None


def parallel_torch(model, world):
    import torch
    import torch.distributed.tensor as tdt
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import implicit_replication

    mesh = init_device_mesh("cpu", (world,))
    if MODEL == "llama":
        # torch's parallelize_module (nn.Linear) with DTensors between the modules (use_local_output
        # False), every other parameter a replicated DTensor: clip_grad_norm_ refuses a mix of DTensor
        # and plain parameters ("_foreach_norm got mixed torch.Tensor and DTensor").
        from torch.distributed.tensor.parallel import parallelize_module
        plan = plan_styles()
        for style in plan.values():
            style.use_local_output = False
        model = parallelize_module(model, mesh, plan)
        for mod in model.modules():
            for pname, p in list(mod.named_parameters(recurse=False)):
                if not isinstance(p, tdt.DTensor):
                    setattr(mod, pname, torch.nn.Parameter(tdt.distribute_tensor(p.detach(), mesh, [tdt.Replicate()])))
        return model, lambda ids: tdt.distribute_tensor(ids, mesh, [tdt.Replicate()]), implicit_replication
    for name, mod in model.named_modules():
        kind = "col" if name.endswith(COL) else "row" if name.endswith(ROW) else None
        for pname, p in list(mod.named_parameters(recurse=False)):
            if kind == "col":  # Conv1D's weight is [in, out]
                pl = [tdt.Shard(1) if pname == "weight" else tdt.Shard(0)]
            elif kind == "row":
                pl = [tdt.Shard(0) if pname == "weight" else tdt.Replicate()]
            else:
                pl = [tdt.Replicate()]
            setattr(mod, pname, torch.nn.Parameter(tdt.distribute_tensor(p.detach(), mesh, pl)))
        if kind == "row":  # RowwiseParallel's output: the partial sums all-reduced (torch's dropout
            # cannot run in place on a Partial tensor)
            mod.register_forward_hook(lambda m, a, out: out.redistribute(mesh, [tdt.Replicate()]))
    model.lm_head.weight = model.transformer.wte.weight  # re-tie what was replaced one by one
    return model, lambda ids: tdt.distribute_tensor(ids, mesh, [tdt.Replicate()]), implicit_replication


def float64_llama():
    """Llama computes RMSNorm and eager attention's softmax in float32 whatever the model's dtype:
    float64 inputs that differ in their last bits (sharded products sum in another order) round
    apart there, ~1e-9 in the loss and, through AdamW, ~1e-4 in the parameters. For the float64
    check both sides keep them in float64 (the same formulas), so the check sees the sharding."""
    import torch
    from transformers.models.llama import modeling_llama

    def rms_norm(self, h):
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    modeling_llama.LlamaRMSNorm.forward = rms_norm
    softmax = torch.nn.functional.softmax

    def softmax_keeping_float64(x, dim=None, _stacklevel=3, dtype=None):
        return softmax(x, dim=dim, dtype=None if x.dtype == torch.float64 else dtype)

    modeling_llama.nn.functional.softmax = softmax_keeping_float64


def train(side, world, steps, warmup, dropout, dtype_name, params_out=None):
    import contextlib

    import torch

    dtype = getattr(torch, dtype_name)
    if MODEL == "llama" and dtype == torch.float64:
        float64_llama()
    model = build(dropout, dtype)
    model, as_input, context = (parallel_bridge if side == "bridge" else parallel_torch)(model, world)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # torch's default (per-parameter on CPU)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ), generator=g) for _ in range(warmup + steps)]
    losses, seconds = [], 0.0
    with (context() if context else contextlib.nullcontext()):
        for i, ids in enumerate(batches):
            t0 = time.perf_counter()
            x = as_input(ids)
            if dtype == torch.float64:  # transformers' loss upcasts to float32 only: the check computes its own
                logits = model(input_ids=x).logits
                loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                         x[:, 1:].reshape(-1))
            else:
                loss = model(input_ids=x, labels=x).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            losses.append((loss.full_tensor() if hasattr(loss, "full_tensor") else loss).item())
            if i >= warmup:
                seconds += time.perf_counter() - t0
    if params_out:
        full = {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach() for n, p in model.named_parameters()}
        if torch.distributed.get_rank() == 0:
            torch.save(full, params_out)
    return losses, steps * BATCH * SEQ / seconds if steps else 0.0


def worker(a):
    import torch.distributed as dist

    dist.init_process_group("gloo")
    world = dist.get_world_size()
    losses, tps = train(a.side, world, a.steps, a.warmup, a.dropout, a.dtype, a.params_out)
    if dist.get_rank() == 0:
        with open(a.out, "w") as f:
            json.dump({"losses": losses, "tokens_per_s": tps}, f)
    import dtensor
    dtensor.exit_process()  # both sides: torch's Gloo workers can abort a rank at teardown


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(side, ranks, steps, warmup, dropout, dtype, tmp, params=False):
    out = os.path.join(tmp, f"{side}.json")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    # A store of this run's own: torchrun's default id for a --master-port job is "none", so the
    # default store (dtensor/collectives/env.h) of an earlier job that drew the same port would be
    # found and refused ("File already exists").
    env["DTENSOR_STORE"] = "file:" + os.path.join(tempfile.mkdtemp(prefix=f"{side}-", dir=tmp), "store")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port",
           str(free_port()), __file__, "--worker", "--side", side, "--steps", str(steps), "--warmup", str(warmup),
           "--dtype", dtype, "--out", out] + (["--dropout"] if dropout else []) + \
        (["--params-out", out + ".pt"] if params else [])
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"{side} failed:\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
    with open(out) as f:
        result = json.load(f)
    if params:
        import torch
        result["params"] = torch.load(out + ".pt")
    return result


def spread(values, fmt):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--model", choices=("gpt2", "llama"), default="gpt2")
    p.add_argument("--check-only", action="store_true", help="only the float64 agreement check")
    p.add_argument("--check-steps", type=int, default=3, help="steps of the float64 check")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--side", help=argparse.SUPPRESS)
    p.add_argument("--warmup", type=int, default=2, help=argparse.SUPPRESS)
    p.add_argument("--dropout", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--params-out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a)
    global MODEL
    MODEL = os.environ["DTENSOR_BENCH_MODEL"] = a.model  # the workers read it
    with tempfile.TemporaryDirectory() as tmp:
        # The same semantics first: float64, dropout 0, the same weights and batches.
        ref = [run(s, a.ranks, 0, a.check_steps, False, "float64", tmp, params=True) for s in ("bridge", "torch")]
        loss_diff = max(abs(x - y) / abs(y) for x, y in zip(ref[0]["losses"], ref[1]["losses"]))
        ours, theirs = ref[0]["params"], ref[1]["params"]
        assert set(ours) == set(theirs), sorted(set(ours) ^ set(theirs))
        param_diff = max(((ours[n] - theirs[n]).abs().max() / theirs[n].abs().max().clamp_min(1e-30)).item()
                         for n in theirs)
        print(f"float64 check, dropout 0, {a.check_steps} steps: max relative difference, losses {loss_diff:.1e}, "
              f"parameters {param_diff:.1e} (tolerance {CHECK_RTOL:.0e})", flush=True)
        if not (loss_diff <= CHECK_RTOL and param_diff <= CHECK_RTOL):
            sys.exit("the two sides do not train the same model")
        if a.check_only:
            return
        tps = {"bridge": [], "torch": []}
        for _ in range(a.runs):
            for side in ("bridge", "torch"):
                tps[side].append(run(side, a.ranks, a.steps, a.warmup, True, "float32", tmp)["tokens_per_s"])
            print(f"run {len(tps['torch'])}: bridge {tps['bridge'][-1]:,.0f}, PyTorch DTensor "
                  f"{tps['torch'][-1]:,.0f} tokens/s", flush=True)
    import torch

    ratios = [b / t for b, t in zip(tps["bridge"], tps["torch"])]
    shape = (f"Llama {LLAMA['num_hidden_layers']} layers, dim {LLAMA['hidden_size']}, {LLAMA['num_attention_heads']} "
             f"heads ({LLAMA['num_key_value_heads']} key/value), vocab {LLAMA['vocab_size']}, no dropout"
             if MODEL == "llama" else
             f"GPT-2 {CONFIG['n_layer']} layers, dim {CONFIG['n_embd']}, {CONFIG['n_head']} heads, vocab "
             f"{CONFIG['vocab_size']}, dropout 0.1")
    print(f"\n{shape}, seq {SEQ}, batch {BATCH}, float32, default AdamW; tp={a.ranks} "
          f"Gloo processes, {os.cpu_count()} cores; {a.steps} timed steps, {a.runs} interleaved runs: median "
          f"(min-max); torch {torch.__version__}\n")
    print("| side | tokens/s | bridge / PyTorch DTensor |\n|---|---:|---:|")
    print(f"| dtensor.bridge | {spread(tps['bridge'], '{:,.0f}')} | {spread(ratios, '{:.2f}')} |")
    print(f"| PyTorch DTensor | {spread(tps['torch'], '{:,.0f}')} | - |")


if __name__ == "__main__":
    main()
