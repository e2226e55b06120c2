# The package in process ranks: a script started by `dtensor launch -n 2` (RANK, WORLD_SIZE and
# DTENSOR_STORE in its environment) joins over Gloo, as under torchrun, and computes sharded results
# that equal numpy's on the same data.
import os
import subprocess
import sys
import textwrap

from launching import LAUNCHER, ROOT, dtensor_launch, launch_script, run_job

SCRIPT = textwrap.dedent("""
    import numpy as np
    import dtensor
    from dtensor import Replicate, Shard

    rng = np.random.default_rng(7)  # the same data on every rank
    a, b = rng.standard_normal((8, 6)), rng.standard_normal((6, 5))
    mesh = dtensor.init_device_mesh("cpu", (2,))
    x = dtensor.distribute_tensor(a, mesh, [Shard(0)]).requires_grad_()
    w = dtensor.distribute_tensor(b, mesh, [Replicate()])
    y = dtensor.ops.mm(x, w)
    np.testing.assert_allclose(y.full_tensor(), a @ b, rtol=1e-12)
    dtensor.ops.sum(y).backward()
    np.testing.assert_allclose(x.grad.full_tensor(), np.ones((8, 5)) @ b.T, rtol=1e-12)
    print(f"rank {dtensor.init_process_group().rank} of {dtensor.init_process_group().world_size}: ok",
          flush=True)
""")


def test_two_process_ranks_under_dtensor_launch(tmp_path):
    launch_script(tmp_path, SCRIPT, 2, ("rank 0 of 2: ok", "rank 1 of 2: ok"), timeout=180)


def test_outside_a_job_the_error_says_how_to_start_ranks():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "DTENSOR_STORE")}
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    code = ("import dtensor\n"
            "try:\n    dtensor.init_device_mesh('cpu', (2,))\n"
            "except dtensor.DTensorError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "dtensor launch -n N" in out.stdout, out.stdout + out.stderr


def test_launch_gives_torch_a_rendezvous_and_keeps_the_users(tmp_path):
    # dtensor launch sets MASTER_ADDR/MASTER_PORT as torchrun --standalone does (one port for every
    # rank), unless the user set them.
    script = tmp_path / "env.py"
    script.write_text("import os; print('rdzv', os.environ['RANK'], os.environ['MASTER_ADDR'], "
                      "os.environ['MASTER_PORT'], flush=True)\n")
    out = run_job(dtensor_launch(3, str(script)), timeout=60, drop=("MASTER_ADDR", "MASTER_PORT"))
    lines = sorted(l.split() for l in out.stdout.splitlines() if l.startswith("rdzv"))
    assert out.returncode == 0 and len(lines) == 3, out.stdout + out.stderr
    assert {l[2] for l in lines} == {"127.0.0.1"} and len({l[3] for l in lines}) == 1
    assert 1024 <= int(lines[0][3]) <= 65535
    out = run_job(dtensor_launch(1, "-c", "import os; print(os.environ.get('MASTER_ADDR'), os.environ['MASTER_PORT'])"),
                  timeout=60, drop=("MASTER_ADDR",), MASTER_PORT="29555")
    assert out.stdout.split() == ["None", "29555"], out.stdout + out.stderr
