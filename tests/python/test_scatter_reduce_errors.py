# scatter_reduce's refusals (the OpInfo oracle covers its values): an unknown `reduce` and the
# backward of a reduce without one each raise a DTensorError naming the call and what is accepted.
import numpy as np
import pytest

import dtensor
from dtensor import Replicate

SELF = np.zeros((3, 4))
INDEX = np.array([[0, 1, 2, 0]], dtype=np.int64)
SRC = np.ones((1, 4))


def call(reduce, backward=False):
    def fn(w):
        mesh = dtensor.init_device_mesh("cpu", (1,))
        x, i, s = (dtensor.distribute_tensor(a, mesh, [Replicate()]) for a in (SELF, INDEX, SRC))
        x.requires_grad_(backward)
        y = dtensor.ops.call("scatter_reduce.two", x, 0, i, s, reduce)
        if backward:
            dtensor.ops.sum(y).backward()
        return y.full_tensor()
    return dtensor.run_threads(1, fn)[0]


def test_unknown_reduce_names_the_accepted_ones():
    with pytest.raises(dtensor.DTensorError, match=r"scatter_reduce.*reduce 'median'; accepted: sum, prod, mean, amax, amin"):
        call("median")


def test_backward_of_a_reduce_without_one_is_refused():
    np.testing.assert_array_equal(call("amax"), [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0]])  # forward runs
    with pytest.raises(dtensor.DTensorError, match=r"reduce 'amax' has no backward in dtensor yet; accepted: sum, mean"):
        call("amax", backward=True)
