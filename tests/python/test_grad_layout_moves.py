# bridge.keep_grad_layout across backwards that raise, and a rank thread's exit with such a
# parameter still referenced from its thread-local data. Reproducers of two bugs found by stepping
# torch.nn.utils.parametrizations.weight_norm (whose backward the bridge refuses) in a training loop:
# the gradients of every later backward on that rank kept the layout the backward chose (Partial),
# and the rank's exit crashed the interpreter (SIGSEGV).
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import dtensor  # noqa: E402
from dtensor import Replicate, Shard, bridge  # noqa: E402

PYTHON_DIR = Path(__file__).resolve().parents[2] / "python"


def _params(mesh, places, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [bridge.keep_grad_layout(nn.Parameter(bridge.distribute(torch.randn(6, 4, generator=g, dtype=torch.float64),
                                                                   mesh, [p]))) for p in places]


def test_gradients_take_their_parameters_layout_after_a_backward_that_raised():
    places = [Replicate(), Shard(0), Shard(1)]
    x = torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        dx = bridge.distribute(x, mesh, [Shard(1)])  # x @ w: a Partial gradient for every w
        ws = _params(mesh, places)

        def boom(grad):
            raise RuntimeError("boom")

        # the replicated parameter's gradient accumulates first (its hook runs: the engine takes the
        # later-made branch first), then the backward raises
        raises = (dx * 2) @ ws[1]
        raises.register_hook(boom)
        accumulates = dx @ ws[0]
        with pytest.raises(RuntimeError, match="boom"):
            (raises.sum() + accumulates.sum()).backward()
        assert ws[0].grad is not None and ws[1].grad is None
        for w in ws:
            w.grad = None
        sum((dx @ w).sum() for w in ws).backward()
        return [(tuple(w.grad.placements), tuple(w.placements), w.grad.full_tensor()) for w in ws]

    for got in dtensor.run_threads(2, rank):
        for (grad_places, param_places, grad), place in zip(got, places):
            assert grad_places == param_places, f"{place}: the gradient stayed {grad_places}"
            torch.testing.assert_close(grad, x.sum(0)[:, None].expand(6, 4), rtol=1e-12, atol=1e-12)


def test_rank_exit_with_a_hooked_parameter_in_thread_local_data():
    # Run apart: the failure is the interpreter's death. A parameter with a post-accumulate-grad hook
    # (torch's, or keep_grad_layout's) in a threading.local when the rank's thread ends.
    script = textwrap.dedent(f"""
        import sys, threading
        sys.path.insert(0, {str(PYTHON_DIR)!r})
        import torch, torch.nn as nn, dtensor
        from dtensor import Replicate, bridge
        local = threading.local()
        def rank(world):
            mesh = dtensor.init_device_mesh("cpu", (2,))
            plain = nn.Parameter(torch.ones(4))
            plain.register_post_accumulate_grad_hook(lambda p: None)
            local.kept = [plain, bridge.keep_grad_layout(nn.Parameter(bridge.distribute(torch.ones(4), mesh, [Replicate()])))]
            return world.rank
        print(dtensor.run_threads(2, rank))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"exit status {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.strip() == "[0, 1]"
