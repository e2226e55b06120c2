"""Export and search time of dtensor.plan on Hugging Face and torchvision models built on `meta` (no
weights, no memory).

    bazel build //python/... && PYTHONPATH=python python3 bench/plan_import.py [--rounds 3]

Per model and mesh: export (torch.export.export plus the walk to the planner's JSON graph, seconds),
search (the planner through python/planner_py.cc: JSON parse, graph build, cost model, search and
baselines, seconds; "CPU s" the same call's CPU time over all its threads, which a loaded machine
does not inflate; "planner" is the report's plan_time_ms, cost model + search only), the planned
step and the Megatron baseline by the same cost model (ms), and the graph's size. Min and max over
--rounds. The language models' loss is a sum (num_items_in_batch given, as the Trainer does): a mean's
divisor needs every target, so its loss would be planned replicated over dp. The vision models
(torchvision, in train mode: batch statistics) are planned from images to logits, without a loss.
"""
import argparse

import torch
import transformers as tf

import dtensor

tf.logging.set_verbosity_error()


def llama3_8b():
    return tf.LlamaForCausalLM(tf.LlamaConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
        use_cache=False))


def llama3_70b():
    return tf.LlamaForCausalLM(tf.LlamaConfig(
        hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
        use_cache=False))


def gpt2_124m():
    return tf.GPT2LMHeadModel(tf.GPT2Config(use_cache=False))


def resnet50():
    import torchvision  # only for its rows: the language-model rows run without it
    return torchvision.models.resnet50()


def vit_b_16():
    import torchvision
    return torchvision.models.vit_b_16()


# (name, model, mesh, input shape: (batch, seq) of token ids, or (batch, channels, height, width) images)
CASES = [("Llama-3 8B", llama3_8b, "dp=8,tp=8", (8, 8192)), ("Llama-3 8B", llama3_8b, "tp=8", (1, 2048)),
         ("Llama-3 8B", llama3_8b, "dp=4,fsdp=4,tp=8", (16, 8192)),
         ("Llama-3 70B", llama3_70b, "dp=8,tp=8", (8, 8192)),
         ("Llama-3 70B", llama3_70b, "dp=4,fsdp=4,tp=8", (16, 8192)),
         ("GPT-2 124M", gpt2_124m, "dp=8,tp=8", (8, 1024)),
         ("ResNet-50", resnet50, "dp=8", (256, 3, 224, 224)),
         ("ResNet-50", resnet50, "dp=2,tp=4", (256, 3, 224, 224)),
         ("ViT-B/16", vit_b_16, "dp=8", (256, 3, 224, 224)),
         ("ViT-B/16", vit_b_16, "dp=2,tp=4", (256, 3, 224, 224))]


def example_inputs(shape):
    """(args, kwargs) on meta: token ids with their labels, or bfloat16 images."""
    if len(shape) == 2:
        ids = torch.zeros(shape, dtype=torch.long, device="meta")
        return (ids,), {"labels": ids, "num_items_in_batch": ids.numel()}
    return (torch.zeros(shape, dtype=torch.bfloat16, device="meta"),), {}


def layer_forward(report):
    """Forward collectives of the repeated layer 1 (a middle layer): "2 AG tp, 2 RS tp"."""
    part = next((p for p in report["layers"] if p["layer"] == 1), None)
    if part is None:
        return "n/a"
    return ", ".join(f"{n} {k}" for k, n in sorted(part["collectives"]["forward"].items())) or "none"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="run the cases whose 'model, mesh' contains this text")
    a = ap.parse_args()
    print("| model, mesh, input | export s | search s | CPU s | planner ms | step ms | Megatron ms | nodes | params "
          "| layer 1 forward: plan / Megatron |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, build, mesh, shape in CASES:
        if a.only not in f"{name}, {mesh}":
            continue
        rows = []
        for _ in range(a.rounds):
            with torch.device("meta"):
                model = build().to(torch.bfloat16)
            args, kwargs = example_inputs(shape)
            r = dtensor.plan(model, args, mesh=mesh, example_kwargs=kwargs)
            meg = next(x for x in r["baselines"] if x["name"] == "megatron")
            rows.append((r["import"]["export_s"], r["import"]["search_s"], r["plan_time_ms"],
                         r["totals"]["step_time_us"] / 1e3, meg["step_time_us"] / 1e3 if meg["valid"] else None,
                         r["import"]["nodes"], r["import"]["parameters"], r["import"]["unknown_ops"],
                         r["import"]["search_cpu_s"], layer_forward(r), layer_forward(meg) if meg["valid"] else "n/a"))

        def span(i, fmt):
            lo, hi = min(x[i] for x in rows), max(x[i] for x in rows)
            return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"
        meg = "n/a" if rows[0][4] is None else span(4, "{:.1f}")
        params = f"{rows[0][6] / 1e9:.2f}B" if rows[0][6] >= 1e9 else f"{rows[0][6] / 1e6:.1f}M"
        print(f"| {name}, {mesh}, {'x'.join(map(str, shape))} | {span(0, '{:.1f}')} | {span(1, '{:.2f}')} | "
              f"{span(8, '{:.2f}')} | {span(2, '{:.0f}')} | {span(3, '{:.1f}')} | {meg} | {rows[0][5]} | {params} | "
              f"{rows[0][9]} / {rows[0][10]} |"
              + (f" unknown: {rows[0][7]}" if rows[0][7] else ""))


if __name__ == "__main__":
    main()
