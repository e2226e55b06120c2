# The size queries and _local_scalar_dense as registered ops (ops/metadata/) against torch: each op,
# run by the bridge's handler (torch_bridge._answered_by, called through DTensor.__torch_dispatch__
# as torch would call it, native and Python dispatch), gives what torch gives for the global tensor
# (a contiguous torch tensor of the same shape and values), on a [2, 2] mesh with Shard (uneven,
# empty blocks), Replicate and Partial inputs. torch itself never dispatches the size queries to the
# bridge (they are CompositeImplicitAutograd: answered from the wrapper's global metadata, checked by
# test_core_aten.py::test_size_queries_and_scalar_reads_are_global); this compares the ops.
import pytest

torch = pytest.importorskip("torch")

import dtensor as dt  # noqa: E402
from dtensor import Partial, Replicate, Shard, bridge  # noqa: E402

aten = torch.ops.aten
SHAPES = [(5, 3), (2, 0, 3), (7,), (), (2, 1, 3, 3), (2, 3, 4, 4), (1, 3, 1, 1), (3, 1, 1, 2), (2, 1, 3, 1, 1),
          (2, 3, 2, 2, 2), (2, 0, 3, 3), (0, 1, 1, 1), (0, 3, 2, 2), (2, 0, 3, 1, 1)]
FORMATS = [torch.contiguous_format, torch.channels_last, torch.channels_last_3d, torch.preserve_format]


def _layouts(rank):
    out = [(Replicate(), Replicate()), (Partial(), Replicate()), (Replicate(), Partial("max"))]
    if rank:
        out += [(Shard(0), Shard(rank - 1)), (Partial(), Shard(rank - 1))]
    return out


def _dispatch(native):
    """func(*args, **kwargs) as torch's dispatcher would hand it to the bridge: through the native
    __torch_dispatch__ or the all-Python one."""
    fn = (bridge._native_torch_dispatch if native else bridge._py_torch_dispatch).__get__(None, bridge.DTensor)
    return lambda func, *args, **kwargs: fn(func, (), args, kwargs)


def _placed(x, mesh, placements):
    """x laid out as `placements`; Partial pieces x / 4 (4 ranks: a sum gives x back), max pieces x."""
    if any(p.is_partial() for p in placements):
        piece = x / 4 if any(p.is_partial() and p.reduce_op == "sum" for p in placements) else x
        d = bridge.distribute(piece, mesh, [Replicate() if p.is_partial() else p for p in placements])
        return bridge.DTensor(d._local, d._spec.with_(list(placements), list(x.shape), str(x.dtype)[6:]), mesh)
    return bridge.distribute(x, mesh, list(placements))


@pytest.mark.parametrize("native", [True, False])
def test_size_query_ops_give_torchs_answers(native):
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        call = _dispatch(native)
        problems, checked = [], 0
        for shape in SHAPES:
            t = torch.zeros(shape)
            for placements in _layouts(len(shape)):
                d = _placed(t, mesh, placements)
                got, want = [], []
                for k in range(-len(shape), len(shape)):
                    got += [call(aten.sym_size.int, d, k), call(aten.sym_stride.int, d, k)]
                    want += [t.size(k), t.stride(k)]
                got += [call(aten.sym_numel.default, d), call(aten.sym_storage_offset.default, d)]
                want += [t.numel(), t.storage_offset()]
                for f in FORMATS:
                    got.append(call(aten.sym_is_contiguous.default, d, memory_format=f))
                    want.append(t.is_contiguous(memory_format=f))
                got.append(call(aten.sym_is_contiguous.default, d))
                want.append(t.is_contiguous())
                checked += len(got)
                if got != want or [type(g) for g in got] != [type(w) for w in want]:
                    problems.append(f"{shape} {placements}: got {got}, torch {want}")
        return problems, checked

    for problems, checked in dt.run_threads(4, fn):
        assert not problems, "\n".join(problems)
        assert checked > 300


def test_size_query_errors_as_torch_refuses():
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        call = _dispatch(True)
        d = _placed(torch.zeros(5, 3), mesh, (Shard(0), Replicate()))
        for op in (aten.sym_size.int, aten.sym_stride.int):
            with pytest.raises(IndexError):
                torch.zeros(5, 3).size(2) if op is aten.sym_size.int else torch.zeros(5, 3).stride(2)
            with pytest.raises(dt.DTensorError, match=r"dim 2 out of range for a 2-d tensor \[5, 3\]; accepted: \[-2, 1\]"):
                call(op, d, 2)
        with pytest.raises(dt.DTensorError, match=r"memory_format 'sideways'; accepted: contiguous_format"):
            call(aten.sym_is_contiguous.default, d, memory_format="sideways")

    dt.run_threads(4, fn)


@pytest.mark.parametrize("native", [True, False])
def test_local_scalar_dense_op_gives_torchs_value(native):
    values = [torch.tensor(1.25, dtype=torch.float64), torch.tensor([-3], dtype=torch.int64),
              torch.tensor([[True]]), torch.tensor([2.5 - 1j], dtype=torch.complex64), torch.tensor(0.1, dtype=torch.float32)]

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        call = _dispatch(native)
        problems = []
        for x in values:
            layouts = [(Replicate(), Replicate())] + ([(Shard(0), Replicate()), (Replicate(), Shard(x.dim() - 1))] if x.dim() else [])
            if x.dtype in (torch.float64, torch.float32):
                layouts.append((Partial(), Partial()))
            for placements in layouts:
                got, want = call(aten._local_scalar_dense.default, _placed(x, mesh, placements)), x.item()
                if type(got) is not type(want) or (got != want and not (x.dtype == torch.float32 and placements[0].is_partial()
                                                                         and abs(got - want) < 1e-7)):
                    problems.append(f"{x.dtype} {list(x.shape)} {placements}: got {got!r}, torch {want!r}")
        return problems

    for problems in dt.run_threads(4, fn):
        assert not problems, "\n".join(problems)
