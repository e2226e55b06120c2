# transformers' GPT-2 and Llama (grouped-query attention) trained through dtensor.bridge and through
# PyTorch DTensor under the same Megatron plan, on 2 Gloo processes each
# (bench/hf_gpt2_bridge_vs_torch.py --check-only): float64, dropout 0, 5 steps of clip_grad_norm_
# and torch's default AdamW; every loss and every parameter must agree within 1e-9 (the bench exits
# non-zero otherwise: it did with transformers' float32 loss in place of a float64 one, and for
# Llama with its float32 RMSNorm and softmax, 7.6e-5 in the parameters). Five steps, not twenty: the
# processes' start-up is most of the time, and a wrong gradient or optimizer state shows from step 1.
import os
import re
import subprocess
import sys

import pytest

from launching import ROOT

pytest.importorskip("transformers")


@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_bridge_trains_as_pytorch_dtensor_does(model):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "hf_gpt2_bridge_vs_torch.py"), "--check-only",
                          "--check-steps", "5", "--model", model], capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.search(r"losses ([0-9.e+-]+), parameters ([0-9.e+-]+)", out.stdout)
    assert m and float(m.group(1)) <= 1e-9 and float(m.group(2)) <= 1e-9, out.stdout
