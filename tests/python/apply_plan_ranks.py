"""One rank of test_apply_plan.py (run by torchrun on Gloo CPU processes): builds a small Hugging
Face model with random weights, applies a parallelize_plan read from a JSON file, runs forward with
labels and backward, and compares logits and every gradient with the same model on one device.
argv: result.json (written by rank 0), then cases: arch (gpt2|llama), plan.json, mesh ("tp=4" or
"dp=2,tp=2"). One process runs every case: torch's import is paid once."""
import copy
import json
import sys

import torch
import torch.distributed as dist
import transformers as tf
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.experimental import implicit_replication

import dtensor

DTYPE = torch.float32
LR = 1e-3


def build(arch):
    # eager attention: CPU sdpa dispatches to _scaled_dot_product_flash_attention_for_cpu, which
    # has no DTensor sharding strategy (docs/PYTHON.md "Applying a plan").
    if arch == "gpt2":
        cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32, use_cache=False,
                            bos_token_id=0, eos_token_id=0, attn_implementation="eager")
        return tf.GPT2LMHeadModel(cfg)
    cfg = tf.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=128, max_position_embeddings=32, use_cache=False,
                         attn_implementation="eager")
    return tf.LlamaForCausalLM(cfg)


def full(t):
    return t.full_tensor() if isinstance(t, DTensor) else t


def case(arch, plan_path, mesh_spec):
    """{"errors": {"logits", parameter (its gradient): relative error; "<parameter> after AdamW": the
    largest difference over the step size; each the largest over the ranks}, "placements",
    "grad_placements"}."""
    dims = dict(d.split("=") for d in mesh_spec.split(","))
    mesh = init_device_mesh("cpu", tuple(int(v) for v in dims.values()), mesh_dim_names=tuple(dims))
    torch.manual_seed(0)
    model = build(arch).to(DTYPE).train()
    for m in model.modules():  # dropout would draw different masks on each rank
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 128, (4, 16))
    tokens = ids.numel()  # the loss is a sum over the global batch, so the dp slices' gradients add up

    r = ref(input_ids=ids, labels=ids, num_items_in_batch=tokens)  # one device
    r.loss.backward()

    with open(plan_path) as f:
        dtensor.apply_plan(model, json.load(f), mesh)
    dp = int(dims.get("dp", 1))
    rows = ids.shape[0] // dp
    lo = (mesh.get_local_rank("dp") if dp > 1 else 0) * rows
    mine = ids[lo:lo + rows]  # data parallel: each dp group runs its slice of the batch
    with implicit_replication():
        out = model(input_ids=mine, labels=mine, num_items_in_batch=tokens)
        out.loss.backward()
    if dp > 1:
        dtensor.allreduce_data_parallel_grads(model, mesh, "dp")

    grads = {n: [str(pl) for pl in p.grad.placements]
             for n, p in model.named_parameters() if isinstance(p.grad, DTensor)}
    # One AdamW step on each: torch's optimizer takes the DTensor parameters and gradients as they are.
    # eps 1e-4: GPT-2's key bias has a zero gradient in exact arithmetic (softmax ignores a shift
    # along keys), and Adam turns its 1e-9 rounding noise into +-lr steps at the default eps.
    for m in (model, ref):
        torch.optim.AdamW(m.parameters(), lr=LR, eps=1e-4).step()

    def rel(a, b):
        return ((a - b).norm() / b.norm()).item()

    names = ["logits"] + [n for n, _ in model.named_parameters()]
    err = [rel(full(out.logits), r.logits[lo:lo + rows])]
    err += [rel(full(p.grad), q.grad) for p, q in zip(model.parameters(), ref.parameters())]
    # After the step, in units of the step size: GPT-2's biases start at 0, so a relative error of
    # the parameter would measure Adam's rounding of a 1e-3 step against a tiny norm.
    names += [f"{n} after AdamW" for n, _ in model.named_parameters()]
    err += [(full(p.detach()) - q.detach()).abs().max().item() / LR
            for p, q in zip(model.parameters(), ref.parameters())]
    worst = torch.tensor(err, dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    placements = {n: [str(pl) for pl in p.placements] if isinstance(p, DTensor) else "plain"
                  for n, p in model.named_parameters()}
    return {"errors": dict(zip(names, worst.tolist())), "placements": placements, "grad_placements": grads}


def main():
    out_path, cases = sys.argv[1], sys.argv[2:]
    tf.logging.set_verbosity_error()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    results = {}
    for i in range(0, len(cases), 3):
        arch, plan_path, mesh_spec = cases[i:i + 3]
        results[f"{arch} {mesh_spec}"] = case(arch, plan_path, mesh_spec)
    if dist.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dtensor.exit_process()  # torch's Gloo workers can abort a rank at teardown


if __name__ == "__main__":
    main()
