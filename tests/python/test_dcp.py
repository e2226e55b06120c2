# torch.distributed.checkpoint saves and loads bridge tensors (their CheckpointableTensor protocol):
# resharded across meshes, into plain torch and PyTorch's DTensor and back, bit for bit
# (tests/python/dcp_ranks.py, 4 processes under `dtensor launch`).
import pytest

from launching import dtensor_launch, run_job

pytest.importorskip("torch")

SCRIPT = __file__.replace("test_dcp.py", "dcp_ranks.py")


def test_dcp_reshards_bridge_tensors(tmp_path):
    out = run_job(dtensor_launch(4, SCRIPT, str(tmp_path / "ckpt")), timeout=240,
                  drop=("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "DTENSOR_STORE"), TMPDIR=str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    for r in range(4):
        assert f"rank {r}: dcp ok" in out.stdout, out.stdout
