"""dtensor.checkpoint: torch.distributed.checkpoint (DCP) saves a crash cannot break, and `dtensor
train` checkpoints to and from DCP.

    dtensor.checkpoint.save(model.state_dict(), "run/dcp")    # every rank; a new version, then LATEST
    dtensor.checkpoint.load(model.state_dict(), "run/dcp")    # the last committed version
    dtensor.checkpoint.to_dcp("run/ckpt", "run/dcp")          # then dcp.load(model.state_dict(), ...)
    dtensor.checkpoint.from_dcp("torch/dcp", "run/ckpt")      # then dtensor train --load run/ckpt

save/load are DCP's own save and load (any state_dict DCP takes: bridge tensors, PyTorch DTensors,
plain tensors), each save into a version folder of its own under the checkpoint folder; the save is
committed when every rank has finished it (DCP's metadata written) by renaming a LATEST file into
place, so a rank killed during a save leaves the previous version the one load reads.

Both run in one process on a one-rank mesh and hold every tensor whole in memory (the checkpoint
of one model, not a cluster's). Names are kept as they are: dtensor's GPT names its parameters as
the PyTorch GPT of the same shape does (bench/train_vs_torch.py's model: tok_emb.weight,
blocks.0.attn.q_proj.weight, ...), and AdamW's moments are "<param>.exp_avg" / "<param>.exp_avg_sq".
dtensor's side is read and written by its own C++ code (nn/checkpoint.h: every size checked before
a byte is copied; a save is committed by renaming LATEST, so a crash leaves the old one loadable).
"""
import json
import math
import os
import re

import numpy as np

from . import _dtensor
from ._dtensor import DTensorError, Replicate

_DTYPES = {"float32": np.float32, "float64": np.float64}
STEP_KEY = "dtensor.step"  # the training step, kept in the DCP checkpoint beside the tensors


_VERSION = re.compile(r"ckpt-[0-9]+-[0-9a-f]{16}")  # nn/checkpoint.h's version directory names


def _fail(what):
    raise DTensorError(f"dtensor.checkpoint: {what}")


def _saved_tensors(path):
    """(name, shape, dtype name) of every tensor and the step, from the metadata of the dtensor
    checkpoint at `path` (its LATEST version, or the flat layout of earlier versions). Every shape
    is checked before anything is allocated: non-negative ints whose bytes fit in the checkpoint's
    rank files (each element is stored at least once). Raises DTensorError naming the file."""
    latest = os.path.join(path, "LATEST")
    version = path
    if os.path.exists(latest):
        try:
            with open(latest, "rb") as f:
                name = f.read(256).decode("ascii").strip()
        except (OSError, UnicodeDecodeError) as e:
            _fail(f"{latest} is unreadable ({e})")
        if not _VERSION.fullmatch(name):
            _fail(f"{latest} is corrupted: it holds {name[:64]!r}, expected a version name ckpt-<step>-<16 hex digits>")
        version = os.path.join(path, name)
    meta_path = os.path.join(version, "metadata.json")
    try:
        with open(meta_path, "rb") as f:
            meta = json.loads(f.read())
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        _fail(f"no readable dtensor checkpoint at {path} ({meta_path}: {e})")
    try:
        tensors = [(t["name"], list(t["shape"]), t["dtype"]) for t in meta["tensors"]]
        step = int(meta["step"])
    except (KeyError, TypeError, ValueError) as e:
        _fail(f"{meta_path} is not dtensor checkpoint metadata ({e!r})")
    try:
        stored = sum(e.stat().st_size for e in os.scandir(version) if re.fullmatch(r"rank[0-9]+\.bin", e.name))
    except OSError as e:
        _fail(f"{version} is unreadable ({e})")
    for name, shape, dtype in tensors:
        if dtype not in _DTYPES:
            _fail(f"{meta_path}: tensor '{name}' is {dtype}; accepted: {', '.join(_DTYPES)}")
        if not all(type(n) is int and n >= 0 for n in shape):
            _fail(f"{meta_path}: tensor '{name}' has shape {shape!r}; accepted: a list of non-negative ints")
        nbytes = math.prod(shape) * np.dtype(_DTYPES[dtype]).itemsize
        if nbytes > stored:
            _fail(f"{meta_path}: tensor '{name}' of shape {shape} {dtype} is {nbytes} bytes, more than the "
                  f"{stored} bytes of the checkpoint's rank files")
    return tensors, step


LATEST = "LATEST"  # the committed version's folder name, in the checkpoint folder
_DCP_VERSION = re.compile(r"dcp-([0-9]{8})-[0-9a-f]{8}")


def _committed(checkpoint_id):
    """The committed versions' folder names under checkpoint_id, newest first (LATEST's lines), []
    when nothing was committed. Raises DTensorError when LATEST is unreadable or corrupted."""
    path = os.path.join(checkpoint_id, LATEST)
    if not os.path.exists(path):
        return []
    try:
        with open(path, "rb") as f:
            names = f.read(1 << 16).decode("ascii").split()
    except (OSError, UnicodeDecodeError) as e:
        _fail(f"{path} is unreadable ({e})")
    if not names or not all(_DCP_VERSION.fullmatch(n) for n in names) or \
            not os.path.isdir(os.path.join(checkpoint_id, names[0])):
        _fail(f"{path} is corrupted: it holds {' '.join(names)[:80]!r}, expected the names of existing folders "
              f"dcp-<8 digits>-<8 hex digits>, newest first")
    return names


def latest(checkpoint_id):
    """The folder of the last committed save under checkpoint_id (what dcp.load takes as its
    checkpoint_id), or None when nothing was committed there. Raises DTensorError when LATEST is
    unreadable or names no version folder."""
    names = _committed(checkpoint_id)
    return os.path.join(checkpoint_id, names[0]) if names else None


def save(state_dict, checkpoint_id, *, keep=2, process_group=None):
    """torch.distributed.checkpoint.save(state_dict) into a new version folder under checkpoint_id,
    committed once every rank has finished: rank 0 then writes LATEST (a temporary file, fsync,
    rename) and removes the versions beyond the last `keep` and any left by failed saves. Called
    on every rank of the default group (or process_group), as dcp.save. A rank killed during the
    save leaves LATEST naming the previous version, which `load` reads. Returns the new version's
    folder. Raises DTensorError for keep < 1 or a corrupted LATEST; DCP's errors for the write."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    if keep < 1:
        _fail(f"save: keep = {keep}; accepted: at least 1 (the version just saved)")
    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank(process_group) if distributed else 0
    committed = _committed(checkpoint_id)  # read by every rank before any rank can commit this save
    number = int(_DCP_VERSION.fullmatch(committed[0]).group(1)) + 1 if committed else 1
    name = [f"dcp-{number:08d}-{os.urandom(4).hex()}"]
    if distributed:  # rank 0's random suffix: a folder no failed save can have left
        dist.broadcast_object_list(name, src=dist.get_global_rank(process_group, 0) if process_group else 0,
                                   group=process_group)
    version = os.path.join(checkpoint_id, name[0])
    dcp.save(state_dict, checkpoint_id=version, process_group=process_group, no_dist=not distributed)
    # dcp.save returns on a rank after the coordinator has written the metadata: the version is whole.
    if rank == 0:
        _commit(checkpoint_id, [name[0], *committed][:keep])
    if distributed:
        dist.barrier(group=process_group)  # no rank returns (and may load) before LATEST names it
    return version


def _commit(checkpoint_id, names):
    """LATEST <- names (newest first), atomically; then every version folder not named is removed
    (older ones and those of failed saves, which were never committed)."""
    import shutil
    tmp = os.path.join(checkpoint_id, f".{LATEST}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write("".join(n + "\n" for n in names))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(checkpoint_id, LATEST))
    try:  # the rename reaches the disk too
        fd = os.open(checkpoint_id, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    for e in os.scandir(checkpoint_id):
        if e.is_dir() and _DCP_VERSION.fullmatch(e.name) and e.name not in names:
            shutil.rmtree(e.path, ignore_errors=True)


def load(state_dict, checkpoint_id, *, process_group=None):
    """torch.distributed.checkpoint.load(state_dict) from the last committed save under
    checkpoint_id (a folder `save` wrote; a plain DCP folder, with its .metadata and no LATEST, is
    read as it is). Returns the folder read. Raises DTensorError when there is neither."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    version = latest(checkpoint_id)
    if version is None:
        if not os.path.exists(os.path.join(checkpoint_id, ".metadata")):
            _fail(f"load: {checkpoint_id} holds no committed save (no {LATEST}) and is no DCP checkpoint "
                  f"(no .metadata)")
        version = checkpoint_id
    distributed = dist.is_available() and dist.is_initialized()
    dcp.load(state_dict, checkpoint_id=version, process_group=process_group, no_dist=not distributed)
    return version


def to_dcp(path, dcp_path):
    """Converts the dtensor checkpoint at `path` (written by `dtensor train --save` on any mesh) into
    a torch.distributed.checkpoint at `dcp_path`: one entry per tensor (its global shape and dtype)
    and the step under STEP_KEY. Returns the step. Raises DTensorError for a missing or corrupted
    checkpoint (naming the file); DCP's own errors for the write."""
    import torch
    import torch.distributed.checkpoint as dcp

    tensors, _ = _saved_tensors(path)

    def rank(world):
        mesh = _dtensor.init_device_mesh("cpu", (1,))
        arrays = [(name, np.zeros(shape, _DTYPES[dtype])) for name, shape, dtype in tensors]
        named = [(name, _dtensor.distribute_tensor(a, mesh, [Replicate()])) for name, a in arrays]
        step = _dtensor._load_checkpoint(path, named)
        return {name: torch.from_numpy(np.array(d.to_local(), copy=True)) for name, d in named}, step

    state, step = _dtensor.run_threads(1, rank)[0]
    state[STEP_KEY] = step
    dcp.save(state, checkpoint_id=dcp_path, no_dist=True)
    return step


def from_dcp(dcp_path, path, step=None):
    """Converts the torch.distributed.checkpoint at `dcp_path` (e.g. a PyTorch GPT's state_dict, or
    one written by to_dcp) into a dtensor checkpoint at `path`, for `dtensor train --load`. float32
    and float64 tensors are taken; AdamW moments ("<param>.exp_avg", ".exp_avg_sq") missing from a
    weights-only checkpoint are written as zeros (a fresh optimizer), and its step is then 0 unless
    given. Returns the step written. Raises DTensorError for an unreadable checkpoint, a tensor of
    another dtype, one larger than the checkpoint's data files, or a non-tensor entry other than
    STEP_KEY."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    try:
        meta = dcp.FileSystemReader(dcp_path).read_metadata().state_dict_metadata
        stored = sum(e.stat().st_size for e in os.scandir(dcp_path) if e.name.endswith(".distcp"))
    except Exception as e:  # torch's reader raises what unpickling a bad file raises
        _fail(f"from_dcp: no readable DCP checkpoint at {dcp_path} ({type(e).__name__}: {e})")
    state = {}
    for name, md in meta.items():
        if name == STEP_KEY:
            continue
        if not isinstance(md, TensorStorageMetadata):
            raise DTensorError(f"dtensor.checkpoint.from_dcp: {dcp_path}: entry '{name}' is not a tensor; accepted: "
                               f"tensors (float32, float64) and '{STEP_KEY}'")
        if md.properties.dtype not in (torch.float32, torch.float64):
            raise DTensorError(f"dtensor.checkpoint.from_dcp: {dcp_path}: tensor '{name}' is {md.properties.dtype}; "
                               f"accepted: torch.float32, torch.float64")
        nbytes = math.prod(md.size) * md.properties.dtype.itemsize
        if nbytes > stored:  # checked before allocating: each element is stored at least once
            _fail(f"from_dcp: {dcp_path}: tensor '{name}' of size {list(md.size)} is {nbytes} bytes, more than "
                  f"the {stored} bytes of its data files")
        state[name] = torch.zeros(tuple(md.size), dtype=md.properties.dtype)
    has_step = STEP_KEY in meta
    if has_step:
        state[STEP_KEY] = 0
    dcp.load(state, checkpoint_id=dcp_path, no_dist=True)
    saved_step = state.pop(STEP_KEY, 0) if has_step else 0
    params = [n for n in state if not n.endswith((".exp_avg", ".exp_avg_sq"))]
    fresh = False
    for n in params:
        for moment in (n + ".exp_avg", n + ".exp_avg_sq"):
            if moment not in state:
                state[moment] = torch.zeros_like(state[n])
                fresh = True
    step = int(step if step is not None else (0 if fresh else saved_step))

    def rank(world):
        mesh = _dtensor.init_device_mesh("cpu", (1,))
        named = [(name, _dtensor.distribute_tensor(t.numpy(), mesh, [Replicate()])) for name, t in state.items()]
        _dtensor._save_checkpoint(path, named, step)

    _dtensor.run_threads(1, rank)
    return step
