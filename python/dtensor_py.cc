// The Python extension `dtensor._dtensor` (DESIGN §1, python/): bindings over the C++ API with names
// mirroring torch.distributed.tensor. Tensors cross through DLPack without copies: any object with
// __dlpack__ (numpy, torch) comes in, and arrays of the "array library" (numpy or torch, see
// ArrayLibrary below) viewing dtensor's storage go out.
//
// Threads: dtensor.run_threads(n, fn) runs fn on n C++ rank threads; each takes the GIL to run
// Python and every binding that may wait for other ranks (collectives, kernels) releases it, else the
// ranks would deadlock on the GIL.
#include <cstdlib>
#include <Python.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "autograd/autograd.h"
#include "autograd/functional.h"
#include "dispatch/dispatch.h"
#include "dispatch/factory.h"
#include "dtensor/collectives/env.h"
#include "dtensor/collectives/gloo_backend.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/core/compute_threads.h"
#include "dtensor/core/dlpack.h"
#include "dtensor/core/error.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "dtensor/placement.h"
#include "kernels/cpu/blas_core.h"
#include "ops/pointwise/rows.h"
#include "ops/registry.h"
#include "planner/graph.h"
#include "dispatch/explain.h"
#include "python/py_values.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dtensor::python {
namespace {

// The backend of the rank running on this thread (set by run_threads), for init_device_mesh, which
// like torch's takes no process-group argument.
thread_local std::shared_ptr<Backend> tls_backend;

// Clears the rank thread's Python state (its threading.local data among it) while the thread still
// holds a second GIL-state reference. Without it the state is cleared inside the last
// PyGILState_Release, and a destructor that takes the GIL itself there (a torch tensor's hooks:
// `register_post_accumulate_grad_hook` on a parameter kept in a threading.local) releases it back
// to zero, so CPython deletes the thread state twice: a segfault at the rank's exit on Python
// before 3.12.5 (CPython gh-119585, whose fix does the same: count up, clear, count down).
struct ClearThreadStateFirst {
  ~ClearThreadStateFirst() {
    PyGILState_STATE extra = PyGILState_Ensure();
    PyThreadState_Clear(PyThreadState_Get());
    PyGILState_Release(extra);
  }
};

// A rank's handle, passed to run_threads' fn.
struct World {
  std::shared_ptr<Backend> backend;
};

// MeshPtr points to a const mesh; a holder keeps nanobind's ownership simple.
struct Mesh {
  MeshPtr mesh;
};

Placements to_placements(const std::vector<Placement>& v) { return Placements(v.begin(), v.end()); }

ReduceOp parse_reduce_op(const std::string& s) {
  if (s == "sum") return ReduceOp::kSum;
  if (s == "avg") return ReduceOp::kAvg;
  if (s == "max") return ReduceOp::kMax;
  if (s == "min") return ReduceOp::kMin;
  DT_FAIL("Partial: reduce_op '", s, "' is not one of sum, avg, max, min");
}

// A Python argument of an op call as the dispatcher takes it (ATen's argument types): a DTensor, a
// list of DTensors, or a value (None, bool, int, float, str, list of ints or of floats).
OpArg op_arg(nb::handle v, const std::string& op, const std::string& what) {
  if (nb::isinstance<DTensor>(v)) return nb::cast<DTensor>(v);
  if (v.is_none()) return IValue();
  if (PyBool_Check(v.ptr())) return IValue(nb::cast<bool>(v));  // before int: bool is an int in Python
  if (PyLong_Check(v.ptr())) return IValue(nb::cast<int64_t>(v));
  if (PyFloat_Check(v.ptr())) return IValue(nb::cast<double>(v));
  if (nb::isinstance<nb::str>(v)) return IValue(nb::cast<std::string>(v));
  if (PyList_Check(v.ptr()) || PyTuple_Check(v.ptr())) {
    nb::sequence seq = nb::borrow<nb::sequence>(v);
    std::vector<DTensor> tensors;
    std::vector<int64_t> ints;
    std::vector<double> floats;
    bool all_int = true;
    size_t nones = 0;
    for (nb::handle e : seq) {
      if (nb::isinstance<DTensor>(e)) {
        tensors.push_back(nb::cast<DTensor>(e));
      } else if (e.is_none()) {  // a Tensor?[] entry (index.Tensor's x[:, i]): an undefined DTensor
        tensors.emplace_back();
        ++nones;
      } else if (!append_number(e, &ints, &floats, &all_int)) {
        DT_FAIL(op, ": ", what, " is a list holding a ", nb::type_name(e.type()).c_str(),
                "; accepted: a list of DTensors, of ints or of floats");
      }
    }
    DT_CHECK(tensors.empty() || (ints.empty() && floats.empty()), op, ": ", what,
             " mixes DTensors and numbers; accepted: a list of DTensors (None entries for a Tensor?[]), of ints "
             "or of floats");
    DT_CHECK(nones == 0 || nones < tensors.size(), op, ": ", what,
             " is a list of None only; accepted: a list holding at least one DTensor");
    if (!tensors.empty()) return tensors;
    if (all_int) return IValue(ints);
    return IValue(floats);
  }
  DT_FAIL(op, ": ", what, " is a ", nb::type_name(v.type()).c_str(),
          "; accepted: DTensor, a list of DTensors, None, bool, int, float, str, a list of ints or floats");
}

// The library whose arrays to_local/full_tensor return. Automatic (the default): that of the most
// recent tensor handed to distribute_tensor/from_local, so a torch user gets torch tensors back;
// set_array_library pins one. Process-wide (thread ranks share it), hence atomic.
enum ArrayLibrary : int { kAutoNumpy, kAutoTorch, kNumpy, kTorch };
std::atomic<int> g_array_library{kAutoNumpy};

bool results_are_torch() {
  const int lib = g_array_library.load();
  return lib == kAutoTorch || lib == kTorch;
}

// An input's library, remembered unless set_array_library pinned one. torch is looked up in
// sys.modules, not imported: a torch tensor exists only where torch was imported.
void note_input_library(nb::handle obj) {
  nb::object torch = nb::module_::import_("sys").attr("modules").attr("get")("torch");
  const bool is_torch = !torch.is_none() && PyObject_IsInstance(obj.ptr(), torch.attr("Tensor").ptr()) == 1;
  int cur = g_array_library.load();
  while ((cur == kAutoNumpy || cur == kAutoTorch) &&
         !g_array_library.compare_exchange_weak(cur, is_torch ? kAutoTorch : kAutoNumpy)) {
  }
}

// Takes any object with __dlpack__ (others through numpy.asarray) as a Tensor viewing its memory.
Tensor tensor_from_py(nb::handle obj) {
  nb::object src = nb::borrow(obj);
  if (!nb::hasattr(src, "__dlpack__")) src = nb::module_::import_("numpy").attr("asarray")(src);
  nb::object cap = src.attr("__dlpack__")();
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  if (managed == nullptr) throw nb::python_error();
  Tensor t = from_dlpack(managed);  // on a throw the capsule still owns the tensor
  // DLPack's protocol: a consumed capsule is renamed so that its destructor leaves it alone.
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  note_input_library(obj);
  return t;
}

nb::dlpack::dtype dlpack_dtype(DType d) {
  switch (d) {
    case DType::kFloat32: return nb::dtype<float>();
    case DType::kFloat64: return nb::dtype<double>();
    case DType::kInt64: return nb::dtype<int64_t>();
    case DType::kInt32: return nb::dtype<int32_t>();
    case DType::kInt16: return nb::dtype<int16_t>();
    case DType::kInt8: return nb::dtype<int8_t>();
    case DType::kUInt8: return nb::dtype<uint8_t>();
    case DType::kBool: return nb::dtype<bool>();
    case DType::kFloat16: return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::kBFloat16: return {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
    case DType::kComplex64: return {static_cast<uint8_t>(nb::dlpack::dtype_code::Complex), 64, 1};
    case DType::kComplex128: return {static_cast<uint8_t>(nb::dlpack::dtype_code::Complex), 128, 1};
  }
  DT_FAIL("to_local/full_tensor: unknown dtype");
}

// An array of the array library viewing t's memory (DLPack, no copy); it keeps t's storage alive.
nb::object tensor_to_array(const Tensor& t, const char* op, bool torch = results_are_torch()) {
  DT_CHECK(t.device().is_cpu(), op, ": ", t.str(), " is not on the cpu; the Python package returns host arrays only");
  DT_CHECK(torch || t.dtype() != DType::kBFloat16, op, ": numpy has no bfloat16 (", t.str(),
           "); call dtensor.set_array_library(\"torch\") for torch tensors");
  auto* keep = new Tensor(t);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape(t.sizes().begin(), t.sizes().end());
  std::vector<int64_t> strides(t.strides().begin(), t.strides().end());  // in elements, as nanobind's
  if (torch) {
    return nb::ndarray<nb::pytorch>(t.data_ptr(), shape.size(), shape.data(), owner, strides.data(),
                                    dlpack_dtype(t.dtype()))
        .cast();
  }
  return nb::ndarray<nb::numpy>(t.data_ptr(), shape.size(), shape.data(), owner, strides.data(),
                                dlpack_dtype(t.dtype()))
      .cast();
}

// This process's backend when it is one rank of a job started by a launcher (`dtensor launch`,
// torchrun, mpirun, srun): Gloo over the store the environment names. Guarded by the GIL.
std::shared_ptr<Backend> g_process_backend;

std::shared_ptr<Backend> init_process_backend() {
  if (!g_process_backend) {
    std::shared_ptr<Backend> b;
    {
      nb::gil_scoped_release release;  // waits for every rank to join
      b = init_backend_from_env();
    }
    g_process_backend = std::move(b);
  }
  return g_process_backend;
}

// The rank's backend: the thread rank's inside run_threads, else the process's, started from the
// launcher's environment on first use (as torch's init_device_mesh starts the default group).
std::shared_ptr<Backend> current_backend(const char* op) {
  if (tls_backend != nullptr) return tls_backend;
  if (g_process_backend != nullptr) return g_process_backend;
  DT_CHECK(launched_as_rank(), op, ": no process group: call it inside dtensor.run_threads(n, fn), or run the script as ranks of a ",
           "job (dtensor launch -n N -- python3 script.py, or torchrun)");
  return init_process_backend();
}

nb::tuple shape_tuple(const Shape& s) {
  nb::list l;
  for (int64_t v : s) l.append(v);
  return nb::tuple(l);
}

}  // namespace

void bind_bridge(nb::module_& m);  // python/bridge_py.cc
}  // namespace dtensor::python

void bind_planner(nanobind::module_& m);     // python/planner_py.cc
void bind_checkpoint(nanobind::module_& m);  // python/checkpoint_py.cc

NB_MODULE(_dtensor, m) {
  using namespace dtensor;
  using namespace dtensor::python;
  m.doc() = "dtensor: tensor-parallel DTensors (torch.distributed.tensor semantics) in native code";
  // nanobind reports every bound object still alive when this module is freed. A script's globals
  // (a DeviceMesh, DTensors) outlive it: Python clears modules in reverse import order, __main__
  // last, so every torch-style script with a module-level mesh would end with a leak report.
  // DTENSOR_LEAK_WARNINGS=1 turns the report back on (tests/python/test_hf_models.py runs a script
  // that keeps nothing alive and checks it reports no leak).
  const char* leak_warnings = std::getenv("DTENSOR_LEAK_WARNINGS");
  nb::set_leak_warnings(leak_warnings != nullptr && std::string(leak_warnings) == "1");
  bind_bridge(m);

  // Registered base first: nanobind tries the most recently registered translator first.
  auto error = nb::exception<Error>(m, "DTensorError", PyExc_ValueError);
  nb::exception<CommError>(m, "DTensorCommError", error.ptr());
  bind_planner(m);
  bind_checkpoint(m);

  nb::class_<Placement>(m, "Placement")
      .def_prop_ro("dim", [](const Placement& p) -> std::optional<int> {
        return p.is_shard() ? std::optional<int>(p.dim) : std::nullopt;
      })
      .def_prop_ro("reduce_op", [](const Placement& p) -> std::optional<std::string> {
        return p.is_partial() ? std::optional<std::string>(reduce_op_name(p.reduce)) : std::nullopt;
      })
      // A weighted shard's weights (one per rank of its mesh dim, divided by their gcd); None otherwise.
      .def_prop_ro("weights", [](const Placement& p) -> std::optional<std::vector<int64_t>> {
        return p.is_weighted() ? std::optional<std::vector<int64_t>>(p.weights()) : std::nullopt;
      })
      .def("is_shard", [](const Placement& p, std::optional<int> dim) {
        return dim ? p.is_shard(*dim) : p.is_shard();
      }, "dim"_a = nb::none())
      .def("is_replicate", &Placement::is_replicate)
      .def("is_partial", &Placement::is_partial)
      .def("__eq__", [](const Placement& a, const Placement& b) { return a == b; })
      .def("__hash__", [](const Placement& p) { return std::hash<std::string>()(p.str()); })
      .def("__repr__", &Placement::str);
  // Shard(d) (torch.chunk parts) or, with weights, the weighted shard S(d)[w0:w1:...] (DESIGN §2).
  m.def("Shard", [](int dim, std::optional<std::vector<int64_t>> weights) {
    return weights ? Shard(dim, *weights) : Shard(dim);
  }, "dim"_a, "weights"_a = nb::none());
  m.def("Replicate", [] { return Replicate(); });
  m.def("Partial", [](const std::string& op) { return Partial(parse_reduce_op(op)); },
        "reduce_op"_a = "sum");

  m.def("set_array_library", [](std::optional<std::string> name) {
    if (!name) {
      g_array_library = kAutoNumpy;
    } else if (*name == "torch") {
      nb::module_::import_("torch");  // an ImportError now, not at the first to_local
      g_array_library = kTorch;
    } else if (*name == "numpy") {
      g_array_library = kNumpy;
    } else {
      DT_FAIL("set_array_library: '", *name, "' is not an array library; accepted: \"torch\", \"numpy\", "
              "None (follow the inputs of distribute_tensor/from_local)");
    }
  }, "name"_a.none(),
     "The library of the arrays to_local/full_tensor return: \"torch\" or \"numpy\"; None (the default)\n"
     "follows the most recent tensor handed to distribute_tensor/DTensor.from_local. Process-wide.");
  m.def("get_array_library", [] { return results_are_torch() ? "torch" : "numpy"; },
        "The library of the arrays to_local/full_tensor return now: \"torch\" or \"numpy\".");

  m.def("init_process_group", [] { return World{init_process_backend()}; },
        "Joins the job the launcher's environment describes (RANK, WORLD_SIZE, DTENSOR_STORE: dtensor "
        "launch, torchrun, mpirun, srun; single-host torchrun needs no DTENSOR_STORE) over Gloo; returns "
        "this rank's World. Idempotent.");
  m.def("destroy_process_group", [] {
    std::shared_ptr<Backend> b = std::move(g_process_backend);
    nb::gil_scoped_release release;
    // Objects that outlive this call (a World, DTensors, meshes) may still hold the backend or its
    // groups: close them now, so that no Gloo thread is left for the interpreter's teardown.
    if (auto* gloo = dynamic_cast<GlooBackend*>(b.get())) gloo->close();
    b.reset();
  });
  m.def("is_initialized", [] { return g_process_backend != nullptr; });
  m.def("_blas_core", &kernels::blas_core_name,
        "The kernels the loaded OpenBLAS runs (\"SkylakeX\", \"Haswell\", \"Prescott\", ...).");

  nb::class_<World>(m, "World")
      .def_prop_ro("rank", [](const World& w) { return w.backend->rank(); })
      .def_prop_ro("world_size", [](const World& w) { return w.backend->world_size(); });

  m.def("run_threads", [](int world_size, nb::callable fn) {
    std::vector<nb::object> results(std::max(world_size, 0));
    // The thread policy of `dtensor train` (dtensor/core/compute_threads.h): the ranks share this
    // process's cores, so each computes with cores / ranks threads unless $OMP_NUM_THREADS or
    // $OPENBLAS_NUM_THREADS says otherwise. torch's OpenMP thread count is per calling thread, so
    // each rank thread sets its own (else every rank thread starts a pool of all the cores: a 16x64
    // mm took 4 ms instead of 3 us); both are restored afterwards.
    const int env_threads = compute_threads_from_env();
    const bool from_env = env_threads > 0;
    const int threads = from_env ? env_threads : threads_per_rank(world_size);
    nb::dict modules = nb::borrow<nb::dict>(nb::module_::import_("sys").attr("modules"));
    nb::object torch = modules.contains("torch") ? nb::object(modules["torch"]) : nb::none();
    const int blas_before = blas_threads();
    const int torch_before = torch.is_none() ? 0 : nb::cast<int>(torch.attr("get_num_threads")());
    if (!from_env) set_blas_threads(threads);
    struct Restore {  // also when a rank raises
      bool blas;
      int blas_before, torch_before;
      nb::object torch;
      ~Restore() {
        if (blas) set_blas_threads(blas_before);
        if (!torch.is_none()) torch.attr("set_num_threads")(torch_before);
      }
    } restore{!from_env, blas_before, torch_before, torch};
    {
      nb::gil_scoped_release release;
      run_threads(world_size, [&](std::shared_ptr<Backend> backend) {
        tls_backend = backend;
        nb::gil_scoped_acquire acquire;
        ClearThreadStateFirst clear_first;  // declared after `acquire`: runs before its release
        if (!torch.is_none()) torch.attr("set_num_threads")(threads);
        results[backend->rank()] = fn(World{backend});
      });
    }
    nb::list out;
    for (auto& r : results) out.append(r);
    return out;
  }, "world_size"_a, "fn"_a,
     "Runs fn(world) on world_size thread ranks and returns their results, by rank. If a rank\n"
     "raises, the others are aborted and the first rank's exception is raised here.");

  nb::class_<Mesh>(m, "DeviceMesh")
      .def_prop_ro("shape", [](const Mesh& m) { return shape_tuple(m.mesh->shape()); })
      .def_prop_ro("ndim", [](const Mesh& m) { return m.mesh->ndim(); })
      .def_prop_ro("mesh_dim_names", [](const Mesh& m) { return m.mesh->dim_names(); })
      .def("size", [](const Mesh& m) { return m.mesh->size(); })
      .def("get_rank", [](const Mesh& m) { return m.mesh->global_rank(); })
      .def("get_coordinate", [](const Mesh& m) { return m.mesh->coordinate(); })
      // mesh["tp"], mesh["dp", "tp"]: the sub-mesh over the named dims that holds this rank, as
      // torch's DeviceMesh.__getitem__; no communication (it shares this mesh's groups).
      .def("__getitem__", [](const Mesh& m, nb::handle key) {
        std::vector<std::string> names;
        if (nb::isinstance<nb::str>(key)) {
          names.push_back(nb::cast<std::string>(key));
        } else {
          bool ok = nb::isinstance<nb::tuple>(key);
          if (ok)
            for (nb::handle k : nb::borrow<nb::tuple>(key)) ok = ok && nb::isinstance<nb::str>(k);
          DT_CHECK(ok, "DeviceMesh[...]: got ", nb::str(key).c_str(),
                   "; accepted: a dim name or a tuple of dim names of ", m.mesh->str());
          for (nb::handle k : nb::borrow<nb::tuple>(key)) names.push_back(nb::cast<std::string>(k));
        }
        return Mesh{m.mesh->submesh(names)};
      })
      .def("__repr__", [](const Mesh& m) { return m.mesh->str(); });

  m.def("init_device_mesh", [](const std::string& device_type, const std::vector<int64_t>& mesh_shape,
                               std::optional<std::vector<std::string>> names) {
    DT_CHECK(device_type == "cpu", "init_device_mesh: device_type '", device_type,
             "' is not supported by the Python package yet; use \"cpu\"");
    auto backend = current_backend("init_device_mesh");
    nb::gil_scoped_release release;  // collective: every rank joins
    return Mesh{DeviceMesh::create(backend, Shape(mesh_shape.begin(), mesh_shape.end()),
                                   names.value_or(std::vector<std::string>{}))};
  }, "device_type"_a, "mesh_shape"_a, "mesh_dim_names"_a = nb::none());

  nb::class_<DTensor>(m, "DTensor")
      .def_prop_ro("shape", [](const DTensor& t) { return shape_tuple(t.shape()); })
      .def_prop_ro("ndim", &DTensor::dim)
      .def_prop_ro("dtype", [](const DTensor& t) { return std::string(dtype_name(t.dtype())); })
      .def_prop_ro("placements", [](const DTensor& t) {
        nb::list l;
        for (const Placement& p : t.placements()) l.append(nb::cast(p));
        return nb::tuple(l);
      })
      .def_prop_ro("device_mesh", [](const DTensor& t) { return Mesh{t.mesh()}; })
      .def("to_local", [](const DTensor& t) { return tensor_to_array(t.local_tensor(), "to_local"); },
           "This rank's block as an array (numpy or torch: dtensor.set_array_library) sharing the "
           "DTensor's memory.")
      .def("_torch_local", [](const DTensor& t) { return tensor_to_array(t.local_tensor(), "to_torch", true); },
           "to_local() as a torch tensor whatever the array library (for dtensor.to_torch).")
      .def("full_tensor", [](const DTensor& t) {
        Tensor full;
        {
          nb::gil_scoped_release release;  // collective
          full = t.full_tensor();
        }
        return tensor_to_array(full, "full_tensor");
      })
      .def("redistribute", [](const DTensor& t, std::optional<Mesh> mesh,
                              std::optional<std::vector<Placement>> placements) {
        DT_CHECK(!mesh || mesh->mesh->same_as(*t.mesh()), "redistribute: to ", mesh->mesh->str(),
                 " from ", t.mesh()->str(), ": moving to another mesh is not supported");
        Placements target = placements ? to_placements(*placements) : t.placements();
        nb::gil_scoped_release release;  // collective
        return t.redistribute(target);
      }, "device_mesh"_a = nb::none(), "placements"_a = nb::none())
      .def_static("from_local", [](nb::handle local, const Mesh& mesh,
                                   const std::vector<Placement>& placements,
                                   std::optional<std::vector<int64_t>> shape) {
        Tensor t = tensor_from_py(local);
        std::optional<Shape> global;
        if (shape) global = Shape(shape->begin(), shape->end());
        nb::gil_scoped_release release;
        return from_local(t, mesh.mesh, to_placements(placements), global);
      }, "local_tensor"_a, "device_mesh"_a, "placements"_a, "shape"_a = nb::none())
      // Autograd, as torch's: leaves that require grad accumulate .grad; backward() seeds ones for a
      // scalar root (or `gradient`, a DTensor laid out like the root).
      .def_prop_rw("requires_grad", [](const DTensor& t) { return requires_grad(t); },
                   [](DTensor& t, bool on) { set_requires_grad(t, on); })
      .def("requires_grad_", [](DTensor& t, bool on) -> DTensor& { return set_requires_grad(t, on); },
           "requires_grad"_a = true, nb::rv_policy::reference)
      .def_prop_ro("grad", [](const DTensor& t) { return grad(t); })
      .def("detach", [](const DTensor& t) { return detach(t); })
      .def("backward", [](const DTensor& t, std::optional<DTensor> gradient) {
        nb::gil_scoped_release release;  // the backward pass runs collectives
        backward(t, std::move(gradient));
      }, "gradient"_a = nb::none())
      .def("__repr__", &DTensor::str);

  m.def("distribute_tensor", [](nb::handle tensor, const Mesh& mesh,
                                const std::vector<Placement>& placements) {
    Tensor t = tensor_from_py(tensor);
    nb::gil_scoped_release release;
    return distribute_tensor(t, mesh.mesh, to_placements(placements));
  }, "tensor"_a, "device_mesh"_a, "placements"_a);

  // Ops by ATen name, through autograd/functional.h (propagate -> redistribute -> kernel).
  nb::module_ ops = m.def_submodule("ops", "DTensor ops by ATen name (collective over the mesh)");
  ops.def("add", [](const DTensor& a, const DTensor& b, double alpha) {
    nb::gil_scoped_release release;
    return F::add(a, b, alpha);
  }, "input"_a, "other"_a, "alpha"_a = 1.0);
  ops.def("mul", [](const DTensor& a, const DTensor& b) {
    nb::gil_scoped_release release;
    return F::mul(a, b);
  }, "input"_a, "other"_a);
  ops.def("mm", [](const DTensor& a, const DTensor& b) {
    nb::gil_scoped_release release;
    return F::mm(a, b);
  }, "input"_a, "mat2"_a);
  ops.def("relu", [](const DTensor& a) {
    nb::gil_scoped_release release;
    return F::relu(a);
  }, "input"_a);
  ops.def("sum", [](const DTensor& a, std::vector<int64_t> dim, bool keepdim) {
    nb::gil_scoped_release release;
    return F::sum(a, std::move(dim), keepdim);
  }, "input"_a, "dim"_a = std::vector<int64_t>{}, "keepdim"_a = false);

  // Any registered op by its ATen name (with or without overload: a bare name picks the overload
  // whose schema accepts the arguments, as ATen does), recorded for autograd. One output: a DTensor;
  // several: a tuple.
  ops.def("call", [](const std::string& name, nb::args args, nb::kwargs kwargs) -> nb::object {
    std::vector<OpArg> pos;
    for (size_t i = 0; i < args.size(); ++i) pos.push_back(op_arg(args[i], name, "argument " + std::to_string(i)));
    std::vector<std::pair<std::string, OpArg>> kw;
    for (auto [k, v] : kwargs) {
      const std::string key = nb::cast<std::string>(k);
      kw.emplace_back(key, op_arg(v, name, "argument '" + key + "'"));
    }
    std::vector<DTensor> out;
    {
      nb::gil_scoped_release release;  // may run collectives
      out = ::dtensor::call(name, pos, kw);
    }
    if (out.size() == 1) return nb::cast(out[0]);
    nb::list l;
    for (const DTensor& t : out) l.append(nb::cast(t));
    return nb::tuple(l);
  }, "Runs the registered op `name` (an ATen name) on DTensors.");
  // A factory op (no tensor input: arange, full, rand, ...; dispatch/factory.h) laid out over `mesh`
  // as `placements`, each rank computing its block; arguments are plain values (a dtype by name).
  ops.def("call_factory", [](const std::string& name, nb::list args, nb::dict kwargs, const Mesh& mesh,
                             std::vector<Placement> placements) {
    auto value = [&](nb::handle v, const std::string& what) {
      OpArg a = op_arg(v, name, what);
      DT_CHECK(std::holds_alternative<IValue>(a), name, ": ", what, " is a DTensor; accepted: plain values "
               "(a factory has no tensor input)");
      return std::get<IValue>(a);
    };
    std::vector<IValue> pos;
    for (size_t i = 0; i < args.size(); ++i) pos.push_back(value(args[i], "argument " + std::to_string(i)));
    std::vector<std::pair<std::string, IValue>> kw;
    for (auto [k, v] : kwargs) {
      const std::string key = nb::cast<std::string>(k);
      kw.emplace_back(key, value(v, "argument '" + key + "'"));
    }
    std::vector<DTensor> out;
    {
      nb::gil_scoped_release release;
      out = call_factory(name, pos, kw, mesh.mesh, to_placements(placements));
    }
    DT_CHECK(out.size() == 1, name, ": returns ", out.size(), " tensors; accepted: one-output factories");
    return out[0];
  }, "name"_a, "args"_a, "kwargs"_a, "mesh"_a, "placements"_a,
     "Runs the registered factory op `name` (no tensor input) with its output laid out over `mesh` as "
     "`placements`, each rank computing only its block; returns the DTensor.");
  ops.def("names", [](bool planned) {
    init_ops();  // the registry fills on first use
    std::vector<std::string> out;
    for (const std::string& name : Registry::get().names())
      if (planned || Registry::get().find(name).kernel) out.push_back(name);
    return out;
  }, "planned"_a = false,
     "The names of the ops that run on DTensors (those with a kernel), sorted; planned=True adds the "
     "planned family's (convolution, batch_norm, pad, ...), which `dtensor plan` and explain take "
     "but nothing runs.");
  ops.def("aten_facts", [] {
    // Every op, the planned family's included; the bridge routes only the ops names() lists (those
    // with a kernel), so a planned op's rules (never run against a kernel) never reach it.
    init_ops();
    nb::dict out;
    for (const std::string& name : Registry::get().names()) {
      const OpDef& op = Registry::get().find(name);
      const AtenFacts& f = op.aten;
      nb::list aliases;
      for (const AtenAlias& a : f.aliases)
        aliases.append(nb::make_tuple(a.name, a.adapt, a.local_size, a.local));
      out[nb::str(name.c_str())] = nb::make_tuple(f.layout_dependent, aliases, f.not_aten, op.no_backward);
    }
    return out;
  }, "How PyTorch meets each registered op (OpDef::aten, ops/registry.h): name -> (layout_dependent, "
     "[(ATen alias, adapter, local_size, ATen op run on the blocks)], why no ATen op has its name, why it "
     "has no backward (OpDef::no_backward)), for every registered op.");
  ops.def("schemas", [] {
    init_ops();
    static const char* kTypes[] = {"Tensor", "Tensor[]", "int", "int[]", "float", "float[]", "bool", "str",
                                   "Scalar"};
    nb::dict out;
    for (const std::string& name : Registry::get().names()) {
      nb::list args;
      for (const ArgDef& a : Registry::get().find(name).schema.args)
        args.append(nb::make_tuple(a.name, a.optional_entries ? "Tensor?[]" : kTypes[a.type], a.optional,
                                   a.has_default, a.keyword_only));
      out[nb::str(name.c_str())] = args;
    }
    return out;
  },
     "Every registered op's arguments (ops/schema.h), the planned family's included (torch.export's "
     "import maps onto them): name -> [(arg, type, optional, has_default, keyword_only)], type one of "
     "Tensor, Tensor[], Tensor?[], int, int[], float, float[], bool, str (also ScalarType), Scalar.");
  ops.def("onnx", [] {
    init_ops();
    nb::dict out;
    for (const std::string& name : Registry::get().names())
      if (const OpDef& op = Registry::get().find(name); !op.onnx.empty()) out[nb::str(name.c_str())] = op.onnx;
    return out;
  }, "The ONNX operators each op is imported from (OpDef::onnx; planner/onnx_import.cc): name -> [operator].");
  ops.def("pointwise_rows", [] {
    std::vector<std::string> unary, binary, with_params;
    for (const UnaryRowInfo& r : kUnaryRows) unary.push_back(r.name);
    for (const BinaryRowInfo& r : kBinaryRows) binary.push_back(r.name);
    for (const ParamRowInfo& r : kParamRows) with_params.push_back(r.name);
    return std::tuple{unary, binary, with_params};
  }, "The ops of the pointwise tables (ops/pointwise/rows.h): (unary names, binary names, names of the "
     "rows with Scalar parameters); unary and binary take Tensor arguments only (binary: broadcasting).");

  // The engine's decision for one request of `dtensor explain` (dispatch/explain.h; the contract is
  // docs/conformance in the shared folder), as a JSON string in and out; dtensor.explain wraps it
  // with dicts.
  m.def("_explain_json", [](const std::string& request, const std::string& hardware) {
    ExplainOptions opt;
    opt.hardware = hardware;
    nb::gil_scoped_release release;  // "run": true executes on thread ranks
    return explain_line(request, opt);
  }, "request"_a, "hardware"_a = "h100-nvlink");
}
