# Arrays out: a native dtensor.DTensor's to_local/full_tensor return torch tensors or numpy arrays
# (the "array library"), viewing dtensor's memory through DLPack; arrays in: what from_dlpack
# accepts, and its errors. A torch tensor handed to distribute_tensor/from_local gives a bridge
# tensor (tests/python/test_torch_api.py); its to_dtensor() is the native DTensor over the same block.
import ctypes

import numpy as np
import pytest

import dtensor
from dtensor import DTensor, Replicate, Shard

torch = pytest.importorskip("torch", reason="torch is not installed: the torch array library is untested")


@pytest.fixture(autouse=True)
def automatic_library():
    dtensor.set_array_library(None)
    yield
    dtensor.set_array_library(None)  # the setting is process-wide: leave the other tests theirs


def one_rank(fn):
    return dtensor.run_threads(1, lambda w: fn(dtensor.init_device_mesh("cpu", (1,))))[0]


def on_two_ranks(fn):
    return dtensor.run_threads(2, lambda w: fn(dtensor.init_device_mesh("cpu", (2,)), w.rank))


def test_the_library_follows_the_latest_input_and_can_be_pinned():
    def fn(mesh):
        assert dtensor.get_array_library() == "numpy"  # before any input
        d = dtensor.distribute_tensor(torch.ones(2, 2), mesh, [Replicate()]).to_dtensor()
        assert isinstance(d.to_local(), torch.Tensor) and isinstance(d.full_tensor(), torch.Tensor)
        n = DTensor.from_local(np.ones(3), mesh, [Replicate()])
        assert isinstance(n.to_local(), np.ndarray) and isinstance(d.to_local(), np.ndarray)
        dtensor.set_array_library("torch")  # pinned: numpy inputs no longer switch it back
        DTensor.from_local(np.ones(3), mesh, [Replicate()])
        assert dtensor.get_array_library() == "torch" and isinstance(n.to_local(), torch.Tensor)
        dtensor.set_array_library("numpy")
        DTensor.from_local(torch.ones(3), mesh, [Replicate()])
        assert isinstance(n.full_tensor(), np.ndarray)
        return True

    assert one_rank(fn)


def test_set_array_library_names_what_it_accepts():
    with pytest.raises(dtensor.DTensorError, match='accepted: "torch", "numpy", None'):
        dtensor.set_array_library("jax")


def test_torch_memory_is_shared_both_ways():
    def fn(mesh, rank):
        block = torch.full((2, 3), float(rank))
        d = DTensor.from_local(block, mesh, [Shard(0)]).to_dtensor()
        view = d.to_local()
        assert isinstance(view, torch.Tensor) and view.data_ptr() == block.data_ptr()
        view[0, 0] = 100.0 + rank  # through the DTensor's view, seen by the caller's tensor
        assert block[0, 0] == 100.0 + rank
        block[1, 2] = -1.0  # and the other way
        assert view[1, 2] == -1.0
        return d.full_tensor()

    for full in on_two_ranks(fn):
        assert isinstance(full, torch.Tensor)
        assert full[:, 0].tolist() == [100.0, 0.0, 101.0, 1.0] and full[:, 2].tolist() == [0, -1, 1, -1]


def test_a_view_outlives_its_dtensor():
    def fn(mesh):
        view = dtensor.distribute_tensor(torch.arange(4.0), mesh, [Replicate()]).to_dtensor().to_local()
        return view  # the DTensor is gone; the capsule's owner keeps the storage

    assert one_rank(fn).tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool,
                                   torch.float16, torch.bfloat16])
def test_torch_dtypes_round_trip(dtype):
    x = (torch.arange(10).reshape(5, 2) % 3).to(dtype)  # 5 rows: uneven over 2 ranks

    def fn(mesh, rank):
        d = dtensor.distribute_tensor(x, mesh, [Shard(0)]).to_dtensor()
        assert d.dtype == str(dtype).removeprefix("torch.")
        local = d.to_local()
        assert local.dtype == dtype and torch.equal(local, torch.chunk(x, 2)[rank])
        return d.full_tensor()

    for full in on_two_ranks(fn):
        assert full.dtype == dtype and torch.equal(full, x)


def test_numpy_has_no_bfloat16():
    def fn(mesh):
        d = dtensor.distribute_tensor(torch.ones(2, dtype=torch.bfloat16), mesh, [Replicate()]).to_dtensor()
        dtensor.set_array_library("numpy")
        d.to_local()

    with pytest.raises(dtensor.DTensorError, match="to_local: numpy has no bfloat16.*set_array_library"):
        one_rank(fn)


@pytest.mark.parametrize("array", [torch.zeros(2, dtype=torch.uint32), torch.zeros(2, dtype=torch.uint16),
                                   np.zeros(2, np.uint32), np.zeros(2, np.uint16), np.zeros(2, np.uint64)],
                         ids=["torch-uint32", "torch-uint16", "numpy-uint32", "numpy-uint16", "numpy-uint64"])
def test_unsupported_input_dtypes_name_the_accepted_ones(array):
    with pytest.raises(dtensor.DTensorError, match="from_dlpack: unsupported dtype .*accepted: float32, float64"):
        one_rank(lambda mesh: DTensor.from_local(array, mesh, [Replicate()]))


@pytest.mark.parametrize("array", [torch.tensor([0, -128, 127], dtype=torch.int8), np.array([0, 255, 7], np.uint8),
                                   np.array([-32768, 5, 32767], np.int16)], ids=["torch-int8", "numpy-uint8", "numpy-int16"])
def test_narrow_integer_arrays_come_in_and_go_out(array):
    """int8, uint8 and int16 are dtensor dtypes (they were refused here before): the values round-trip."""
    out = one_rank(lambda mesh: DTensor.from_local(array, mesh, [Replicate()]).full_tensor())
    assert np.array_equal(np.asarray(out), np.asarray(array)) and np.asarray(out).dtype == np.asarray(array).dtype


@pytest.mark.parametrize("array", [torch.tensor([1 + 2j, -3.5j], dtype=torch.complex64),
                                   np.array([1 + 2j, -3.5j], np.complex128)], ids=["torch-complex64", "numpy-complex128"])
def test_complex_arrays_come_in_and_go_out(array):
    """complex64/complex128 are dtensor dtypes (they were refused here before): the values round-trip."""
    out = one_rank(lambda mesh: DTensor.from_local(array, mesh, [Replicate()]).full_tensor())
    assert np.array_equal(np.asarray(out), np.asarray(array)) and np.asarray(out).dtype == np.asarray(array).dtype


def test_strided_views_come_in_and_go_out_without_copy():
    t = torch.arange(12.0).reshape(3, 4)

    def fn(mesh):
        d = DTensor.from_local(t.t(), mesh, [Replicate()]).to_dtensor()  # a transposed, non-contiguous view
        view = d.to_local()
        assert view.shape == (4, 3) and view.stride() == (1, 4) and view.data_ptr() == t.data_ptr()
        view[3, 0] = -5.0
        return d.full_tensor()

    full = one_rank(fn)
    assert t[0, 3] == -5.0 and torch.equal(full, t.t())


def test_negative_strides_are_rejected():
    with pytest.raises(dtensor.DTensorError, match="from_dlpack: negative strides"):
        one_rank(lambda mesh: DTensor.from_local(np.arange(4.0)[::-1], mesh, [Replicate()]))


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLManagedTensor(ctypes.Structure):  # DLTensor, then manager_ctx and deleter
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _OnDevice:
    """An array on another device (Vulkan, 7) as DLPack describes it: torch on this host has none."""

    def __init__(self):
        self.buf = np.zeros(4, np.float32)
        self.shape = (ctypes.c_int64 * 1)(4)
        self.managed = _DLManagedTensor(self.buf.ctypes.data, _DLDevice(7, 0), 1, 2, 32, 1, self.shape)

    def __dlpack__(self):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


def test_other_devices_are_rejected():
    with pytest.raises(dtensor.DTensorError, match="from_dlpack: unsupported device type 7; accepted: CPU"):
        one_rank(lambda mesh: dtensor.distribute_tensor(_OnDevice(), mesh, [Replicate()]))
