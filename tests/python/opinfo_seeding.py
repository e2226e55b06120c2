# Host-only reseeding for torch's OpInfo sample iterators, shared by opdb_oracle and opinfo_oracle.
#
# torch.testing's sample iterators (common_utils.TrackedInputIter) call common_utils.set_rng_seed
# before every sample, which calls torch.manual_seed. Without a CUDA device, torch.manual_seed
# queues a lazy seed for each of CUDA, XPU and MTIA and records a Python stack for each
# (traceback.format_stack, about 0.4 ms apiece): 50 s of op_db's 124 s on one core (cProfile,
# 2026-11-29). No device generator is ever used by these CPU oracles, so on such a machine the
# samples are seeded exactly as torch seeds its CPU generator, Python's and NumPy's, and nothing else.
import random

import torch
from torch.testing._internal import common_utils


def seed_host_generators_only():
    """Replaces common_utils.set_rng_seed with one that seeds torch's CPU generator, `random` and
    NumPy, as torch's does, when no CUDA device is visible; with one, torch's stays (it seeds the
    device too). Idempotent."""
    if torch.cuda.is_available() or getattr(common_utils.set_rng_seed, "host_only", False):
        return

    def set_rng_seed(seed=None):
        seed = common_utils.SEED if seed is None else seed
        torch.default_generator.manual_seed(seed)
        random.seed(seed)
        if common_utils.TEST_NUMPY:
            import numpy as np
            np.random.seed(seed)

    set_rng_seed.host_only = True
    common_utils.set_rng_seed = set_rng_seed
