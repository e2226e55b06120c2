"""`dtensor train` side by side with PyTorch on the same model, weights and batches.

    bazel build //tools:dtensor && python3 bench/train_vs_torch.py [--model default|wide|large] [--steps N] [--runs R]
    python3 bench/train_vs_torch.py --check-only [--steps N]    # correctness only (tests/python)

The PyTorch model below is dtensor's GPT (nn/layers.cc): token + position embeddings, pre-norm
blocks (LayerNorm eps 1e-5; causal SDPA over q/k/v/out projections with biases; MLP fc 4x, tanh
GELU, proj), final LayerNorm, lm_head without bias (not tied), mean cross-entropy; AdamW as
nn/optim.cc (betas 0.9/0.999, eps 1e-8, weight decay 0.01 on every parameter). Both sides start
from the same weights and see the same batches: `dtensor train --record DIR` writes its initial
checkpoint and every step's batch, and the PyTorch runs load and replay them.

Correctness, first and always: dtensor trains in float64 with --check (tp=2 on threads, which
also compares with its own one-rank run), and plain PyTorch and PyTorch DTensor tp=2 (Gloo) replay
the run in float64; every step's loss must agree within CHECK_RTOL. Then (not with --check-only)
the timed float32 rows, each run --runs times with the rows interleaved (median tokens/s, min-max):
  dtensor threads tp=1, 2, 4 and Gloo processes tp=2, 4 (`dtensor train`, its own thread policy)
  plain PyTorch eager: one process, one compute thread per core (and, for scale, one thread)
  PyTorch DTensor tp=1 (a 1-rank Gloo mesh) and tp=2, 4 (one process per rank, Gloo), Megatron plan
AdamW like for like: dtensor's is fused (nn/optim.cc), so plain PyTorch runs `fused=True` (its CPU
fused kernel); a second plain-PyTorch row runs `foreach=True`. PyTorch DTensor runs its default
(per-parameter) AdamW: with the Megatron plan's mix of DTensor and plain parameters both its fused
and foreach paths refuse to run ("got mixed torch.Tensor and DTensor"). Ratios are taken within each run (the
same round of the interleaving) and reported as the median of the per-run ratios with min-max.
The "large" model (8 layers, dim 512, seq 256, batch 4) is where compute and communication, not dispatch,
dominate; it times fewer rows (dtensor tp=1 and Gloo tp=2 against their PyTorch counterparts).
Compute threads follow one policy everywhere: cores / ranks on this machine, at least 1 (torchrun's
OMP_NUM_THREADS=1 when ranks >= cores; dtensor/core/compute_threads.h). Every timed row's losses
must also agree with dtensor's float32 record within BENCH_RTOL. tokens/s = steps * batch * seq
over the summed step times (forward, backward, AdamW, the loss read back), as `dtensor train`
reports it; process start-up and the model's construction are not timed.
"""
import argparse
import json
import math
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DTENSOR = os.path.join(ROOT, "bazel-bin", "tools", "dtensor")
# The flags both sides take (dtensor train's names); batch and lr are dtensor train's defaults except
# for "large", whose batch of 4 keeps a step near 5 s on 2 cores.
MODELS = {"default": {"layers": 2, "dim": 64, "heads": 4, "seq": 64, "batch": 8},
          "wide": {"layers": 4, "dim": 256, "heads": 4, "seq": 64, "batch": 8},
          "large": {"layers": 8, "dim": 512, "heads": 8, "seq": 256, "batch": 4}}
LR = 3e-3

# float64: the implementations differ only in summation order (BLAS, reductions, SDPA's softmax),
# about 1e-16 per op; measured over 10 steps of the default model: 2e-15. A semantic difference
# moves the loss far more in the same 10 steps (measured, PyTorch side changed): erf instead of
# tanh GELU 5e-6, no weight decay on 1-d parameters 3e-5, AdamW eps 1e-6 4e-5, LayerNorm eps 1e-6
# 2e-4; so does loading float64 weights through float32 (2e-10 at step 1). 1e-9 sits between.
CHECK_RTOL = 1e-9
# float32: the same order effects start near 1e-7 (1e-6 after 20 steps here) and grow with training's
# sensitivity to about 1e-4 over a few hundred steps (tools/train.h). 1e-3 leaves room for long
# --steps; the float64 check above is the one that pins the semantics down.
BENCH_RTOL = 1e-3


def cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads_per_rank(ranks):
    return max(1, cores() // ranks)


def clean_env(**extra):
    # No inherited rank or thread variables: each run gets the same thread policy from its ranks.
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "DTENSOR_STORE", "MASTER_ADDR",
            "MASTER_PORT", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({k: str(v) for k, v in extra.items()})
    return env


# --- dtensor's record (tools/train.h, --record) ---------------------------------------------------

def read_checkpoint(d):
    """Full tensors by name from a dtensor checkpoint (layout: nn/checkpoint.h), any mesh."""
    version = os.path.join(d, open(os.path.join(d, "LATEST")).read().strip())
    meta = json.load(open(os.path.join(version, "metadata.json")))
    dtypes = {"float32": np.float32, "float64": np.float64}
    full = {t["name"]: np.full(t["shape"], np.nan, dtypes[t["dtype"]]) for t in meta["tensors"]}
    for rank in meta["ranks"]:
        blob = open(os.path.join(version, f"rank{rank}.bin"), "rb").read()
        assert blob[:8] == b"DTCKPT1\n", f"{version}/rank{rank}.bin: not a dtensor checkpoint file"
        (hlen,) = struct.unpack("<Q", blob[8:16])
        data = 16 + hlen
        for b in json.loads(blob[16:data])["blocks"]:
            t = full[b["name"]]
            block = np.frombuffer(blob, t.dtype, b["nbytes"] // t.itemsize, data + b["begin"]).reshape(b["shape"])
            t[tuple(slice(o, o + n) for o, n in zip(b["offset"], b["shape"]))] = block
    for name, t in full.items():
        assert not np.isnan(t).any(), f"{version}: {name} is not fully covered by the rank files"
    return full, meta["step"]


def read_steps(path):
    rows = [json.loads(line) for line in open(path)]
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1)), f"{path}: steps out of order"
    return [r["loss"] for r in rows], np.array([r["tokens"] for r in rows], dtype=np.int64)


def run_dtensor(backend, tp, model, steps, record, check=False):
    """One `dtensor train` run, recorded into `record` (outside the timed step): (losses, tokens/s)."""
    if os.path.exists(record):
        shutil.rmtree(record)
    cmd = [DTENSOR, "train", "--backend", backend, "--mesh", f"tp={tp}", "--steps", str(steps),
           "--lr", repr(LR), "--log-every", str(steps), "--sample", "0",
           "--record", record]
    cmd += [a for k, v in MODELS[model].items() for a in (f"--{k}", str(v))]
    if check:
        cmd.append("--check")
    out = subprocess.run(cmd, env=clean_env(DTENSOR_TIMEOUT=300), capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)} exited {out.returncode}:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    done = re.search(r"^done: \d+ steps, (\S+) tokens/s", out.stdout, re.M)
    if not done:
        sys.exit(f"FAILED: no 'done:' line from {' '.join(cmd)}:\n{out.stdout[-3000:]}")
    losses, _ = read_steps(os.path.join(record, "steps.jsonl"))
    if len(losses) != steps:
        sys.exit(f"FAILED: {record}/steps.jsonl has {len(losses)} steps, {steps} were run")
    return losses, float(done.group(1))


# --- the PyTorch side ---------------------------------------------------------------------------

def make_gpt(torch, vocab, layers, dim, heads, seq):
    nn, F = torch.nn, torch.nn.functional
    hd = dim // heads

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(dim, dim) for _ in range(4))

        def forward(self, x):
            B, T, _ = x.shape
            # -1 heads: under tensor parallelism q/k/v hold this rank's heads only.
            q, k, v = (p(x).view(B, T, -1, hd).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out_proj(y.transpose(1, 2).reshape(B, T, -1))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

        def forward(self, x):
            return self.proj(F.gelu(self.fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn, self.ln2, self.mlp = nn.LayerNorm(dim, eps=1e-5), Attention(), nn.LayerNorm(dim, eps=1e-5), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb, self.pos_emb = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f, self.lm_head = nn.LayerNorm(dim, eps=1e-5), nn.Linear(dim, vocab, bias=False)

        def forward(self, ids):
            x = self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1]))[None]
            for b in self.blocks:
                x = b(x)
            return self.lm_head(self.ln_f(x))

    return GPT()


def megatron_plan(layers):
    """dtensor's plan (nn/parallel.cc megatron_plan, no sequence or loss parallelism) in torch terms."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {"tok_emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),  # vocab-parallel
            "lm_head": ColwiseParallel(output_layouts=Replicate())}  # logits gathered, as dtensor's
    for i in range(layers):
        for name in ("attn.q_proj", "attn.k_proj", "attn.v_proj", "mlp.fc"):
            plan[f"blocks.{i}.{name}"] = ColwiseParallel()
        for name in ("attn.out_proj", "mlp.proj"):
            plan[f"blocks.{i}.{name}"] = RowwiseParallel()
    return plan


def worker(a):
    """One PyTorch rank (or the only process of plain PyTorch): replays the record, writes results."""
    import torch

    torch.set_num_threads(a.threads)
    dtype = {"float32": torch.float32, "float64": torch.float64}[a.dtype]
    state, step0 = read_checkpoint(os.path.join(a.record, "init"))
    assert step0 == 0, "the record must start from step 0 (fresh optimizer state)"
    _, tokens = read_steps(os.path.join(a.record, "steps.jsonl"))
    tokens = torch.from_numpy(tokens[: a.steps])
    assert len(tokens) == a.steps, f"the record has {len(tokens)} steps, {a.steps} asked for"
    params = {k: torch.from_numpy(v) for k, v in state.items() if not k.endswith((".exp_avg", ".exp_avg_sq"))}
    cfg = MODELS[a.model]
    model = make_gpt(torch, params["tok_emb.weight"].shape[0], cfg["layers"], cfg["dim"], cfg["heads"], cfg["seq"])
    model.to(dtype)  # first: loading into float32 parameters would round float64 weights
    model.load_state_dict(params, strict=True)  # every name and shape must match dtensor's
    if a.world:
        import datetime

        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank,
                                world_size=a.world, timeout=datetime.timedelta(seconds=300))
        mesh = init_device_mesh("cpu", (a.world,), mesh_dim_names=("tp",))
        model = parallelize_module(model, mesh, megatron_plan(cfg["layers"]))
    # fused: one kernel over all parameters, as dtensor's; foreach: the multi-tensor path.
    kind = {"fused": {"fused": True}, "foreach": {"foreach": True}, "default": {}}[a.optimizer]
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, **kind)
    F = torch.nn.functional
    losses, seconds = [], 0.0
    for s in range(a.steps):
        t0 = time.perf_counter()
        x, y = tokens[s, :, :-1], tokens[s, :, 1:]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        seconds += time.perf_counter() - t0
    if a.rank == 0:
        with open(a.out, "w") as f:
            json.dump({"losses": losses, "tokens_per_s": a.steps * tokens.shape[1] * cfg["seq"] / seconds}, f)
    if a.world:
        # dtensor.exit_process's ending without the package (this side runs plain torch): torch's
        # Gloo workers can abort a rank during the interpreter's teardown (docs/PYTHON.md).
        import torch.distributed as dist

        dist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torch(world, model, steps, record, dtype, tmp, threads=None, optimizer="fused"):
    """Plain PyTorch (world 0: one process, no mesh) or PyTorch DTensor on `world` Gloo processes,
    with `threads` compute threads per process (default: the common policy) and AdamW `optimizer`
    (fused, foreach or default)."""
    ranks = max(1, world)
    out = os.path.join(tmp, f"torch-{world}.json")
    if os.path.exists(out):
        os.remove(out)
    port = free_port()
    th = threads or threads_per_rank(ranks)
    procs = []
    for r in range(ranks):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--model", model, "--steps", str(steps),
               "--record", record, "--dtype", dtype, "--world", str(world), "--rank", str(r), "--port", str(port),
               "--threads", str(th), "--out", out, "--optimizer", optimizer]
        procs.append(subprocess.Popen(cmd, env=clean_env(OMP_NUM_THREADS=th, MKL_NUM_THREADS=th),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = [p.communicate(timeout=3600)[0] for p in procs]
    if any(p.returncode for p in procs) or not os.path.exists(out):
        sys.exit(f"FAILED: PyTorch run (world {world}) failed:\n" + "\n".join(l[-3000:] for l in logs))
    res = json.load(open(out))
    return res["losses"], res["tokens_per_s"]


def rel_diffs(losses, ref):
    assert len(losses) == len(ref), f"{len(losses)} losses against {len(ref)} reference steps"
    out = []
    for a, b in zip(losses, ref):
        d = abs(a - b) / max(1e-12, abs(b))
        out.append(math.inf if math.isnan(d) else d)  # a NaN loss never agrees
    return out


def agree(name, losses, ref, rtol):
    """The largest relative difference of `losses` from `ref`; exits with the first bad step if above rtol."""
    diffs = rel_diffs(losses, ref)
    worst = max(diffs)
    print(f"  {name:<40} largest relative loss difference {worst:.2e} over {len(ref)} steps"
          f" ({'ok' if worst <= rtol else f'ABOVE {rtol:g}'})", flush=True)
    if worst > rtol:
        bad = next(i for i, d in enumerate(diffs) if d > rtol)
        sys.exit(f"FAILED: {name} does not train the same function as dtensor: step {bad + 1} loss "
                 f"{losses[bad]!r} vs dtensor's {ref[bad]!r} (tolerance {rtol:g} relative)")
    return worst


def check(model, steps, tmp):
    rec = os.path.join(tmp, "check-record")
    print(f"check: {model} model, {steps} steps, float64; dtensor tp=2 (threads, --check) recorded", flush=True)
    ref, _ = run_dtensor("threads", 2, model, steps, rec, check=True)
    agree("plain PyTorch", run_torch(0, model, steps, rec, "float64", tmp)[0], ref, CHECK_RTOL)
    agree("PyTorch DTensor tp=2 (Gloo)", run_torch(2, model, steps, rec, "float64", tmp, optimizer="default")[0], ref,
          CHECK_RTOL)


def spread(values, fmt):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def bench(model, steps, runs, tmp):
    import torch

    rec = os.path.join(tmp, "bench-record")
    ref, _ = run_dtensor("threads", 1, model, steps, rec)  # the float32 reference; not timed
    # (implementation, backend, tp, compute threads per rank, AdamW). The extra one-thread plain
    # PyTorch row separates the thread policy's effect (two threads on two busy cores can be several
    # times slower than one) from the framework's.
    plain = ("PyTorch eager", "-", 1, threads_per_rank(1), "fused")
    if model == "large":
        rows = [("dtensor", "threads", 1), ("dtensor", "gloo", 2)]
        torch_dt = (1, 2)
    else:
        rows = [("dtensor", "threads", 1), ("dtensor", "threads", 2), ("dtensor", "threads", 4),
                ("dtensor", "gloo", 2), ("dtensor", "gloo", 4)]
        torch_dt = (1, 2, 4)
    rows = [r + (threads_per_rank(r[2]), "fused") for r in rows]
    rows += [plain, plain[:4] + ("foreach",)]
    if cores() > 1 and model != "large":
        rows.append(("PyTorch eager", "-", 1, 1, "fused"))
    # PyTorch DTensor runs neither the fused nor the foreach AdamW here: the Megatron plan leaves the
    # embeddings, norms and lm_head plain tensors beside the DTensor weights, and both paths refuse
    # the mix ("_fused_adamw_ / _foreach_mul_ got mixed torch.Tensor and DTensor"). Its rows run the
    # per-parameter loop (torch's CPU default), the only one that works.
    rows += [("PyTorch DTensor", "gloo", tp, threads_per_rank(tp), "default") for tp in torch_dt]
    tps = {r: [] for r in rows}
    diff = {r: 0.0 for r in rows}
    print(f"timing: {model} model, {steps} steps, {runs} run(s) of each row, float32", flush=True)
    for _ in range(runs):  # rows interleaved, so that a burst of load spreads over all of them
        for r in rows:
            impl, backend, tp, th, optimizer = r
            if impl == "dtensor":
                losses, t = run_dtensor(backend, tp, model, steps, os.path.join(tmp, "row-record"))
            else:
                losses, t = run_torch(0 if impl == "PyTorch eager" else tp, model, steps, rec, "float32", tmp, th,
                                      optimizer)
            diff[r] = max(diff[r], agree(f"{impl} {backend} tp={tp}, {th} thread(s), {optimizer}", losses, ref,
                                         BENCH_RTOL))
            tps[r].append(t)
    # Counterparts at equal tp and backend; dtensor's thread ranks at tp=1 run in one process with no
    # communication, as the 1-rank Gloo mesh does. Thread ranks at tp > 1 have no PyTorch counterpart.
    twin = {("dtensor", "threads", 1): ("PyTorch DTensor", "gloo", 1),
            ("dtensor", "gloo", 2): ("PyTorch DTensor", "gloo", 2),
            ("dtensor", "gloo", 4): ("PyTorch DTensor", "gloo", 4)}
    twin = {k + (threads_per_rank(k[2]), "fused"): v + (threads_per_rank(v[2]), "default") for k, v in twin.items()}

    def ratios(r, other):  # within each run: the same round of the interleaving
        return [a / b for a, b in zip(tps[r], tps[other])]

    cfg = MODELS[model]
    print(f"\nGPT {cfg['layers']} layers, dim {cfg['dim']}, {cfg['heads']} heads, seq {cfg['seq']}, batch {cfg['batch']}, "
          f"float32; {cores()} cores; {steps} steps, {runs} interleaved runs: median (min-max); "
          f"torch {torch.__version__}\n")
    print("| run | backend | tp | threads/rank | AdamW | tokens/s | dtensor / plain torch (fused) | "
          "dtensor / torch DTensor | max loss diff vs record |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        impl, backend, tp, th, optimizer = r
        ratio_plain = spread(ratios(r, plain), "{:.2f}") if impl == "dtensor" else "-"
        ratio_twin = spread(ratios(r, twin[r]), "{:.2f}") if r in twin and twin[r] in tps else "-"
        print(f"| {impl} | {backend} | {tp} | {th} | {optimizer} | {spread(tps[r], '{:,.0f}')} | {ratio_plain} | "
              f"{ratio_twin} | {diff[r]:.1e} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="default")
    p.add_argument("--steps", type=int, help="steps per run (default: 50; with --check-only, 10)")
    p.add_argument("--runs", type=int, default=5, help="interleaved runs of each row; median (min-max) reported")
    p.add_argument("--check-only", action="store_true", help="only the float64 agreement check")
    p.add_argument("--check-steps", type=int, default=10, help="steps of the float64 check before timing")
    # Internal: one PyTorch rank, started by run_torch.
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for name, kind in (("record", str), ("dtype", str), ("world", int), ("rank", int), ("port", int),
                       ("threads", int), ("out", str), ("optimizer", str)):
        p.add_argument(f"--{name}", type=kind, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a)
    steps = a.steps if a.steps is not None else (10 if a.check_only else 50)
    if steps < 1 or a.runs < 1 or a.check_steps < 1:
        p.error("--steps, --runs and --check-steps must be >= 1")
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("torch is not installed (scripts/setup_python.sh installs it)")
    if not os.access(DTENSOR, os.X_OK):
        sys.exit(f"{DTENSOR} is missing: bazel build //tools:dtensor")
    with tempfile.TemporaryDirectory(prefix="train_vs_torch-") as tmp:
        check(a.model, steps if a.check_only else a.check_steps, tmp)
        if not a.check_only:
            bench(a.model, steps, a.runs, tmp)


if __name__ == "__main__":
    main()
