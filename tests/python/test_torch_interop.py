# dtensor.from_torch / to_torch in 4 process ranks (tests/python/torch_interop_ranks.py): under
# torchrun, whose environment has no DTENSOR_STORE (a single-host job defaults to a file store), and
# under `dtensor launch`, where torch joins through a file in the job's store folder.
import os
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: from_torch/to_torch are untested")

from launching import dtensor_launch, run_job, torchrun  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_interop_ranks.py")


def run_ranks(cmd, tmp_path):
    # TMPDIR: torchrun's default store folder (and its logs) go to the test's folder, not /tmp.
    out = run_job(cmd, timeout=240, drop=("DTENSOR_STORE", "RANK", "WORLD_SIZE"), OMP_NUM_THREADS="1",
                  TMPDIR=str(tmp_path))
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-8000:]
    for rank in range(4):
        assert f"rank {rank}: " in out.stdout and "cases ok" in out.stdout, out.stdout


def test_torch_dtensors_round_trip_under_torchrun(tmp_path):
    run_ranks(torchrun(4, SCRIPT), tmp_path)
    assert [p.name for p in tmp_path.glob("dtensor-store-*")], "the default store is not where env.h says"


def test_torch_dtensors_round_trip_under_dtensor_launch(tmp_path):
    run_ranks(dtensor_launch(4, SCRIPT), tmp_path)


def test_from_torch_outside_a_job_names_what_it_accepts():
    import dtensor

    with pytest.raises(dtensor.DTensorError, match="from_torch: got a torch.Tensor; accepted"):
        dtensor.from_torch(torch.ones(2))
    with pytest.raises(dtensor.DTensorError, match="to_torch: got a torch.Tensor; accepted: a dtensor.DTensor"):
        dtensor.to_torch(torch.ones(2), None)
