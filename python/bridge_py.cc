// dtensor._dtensor._bridge: the native half of dtensor.bridge (python/dtensor/torch_bridge.py), the
// torch tensor subclass through which PyTorch code runs on sharded tensors (DESIGN §9). For one ATen
// call the bridge asks this module for the engine's decision (the same cached propagate() as
// call_op), redistributes the inputs to the chosen strategy here, and lets torch's ATen kernel
// compute on the local shards; when the strategy carries a distributed step (DESIGN §6) the whole op
// runs here instead (execute_strategy), since ATen has no such step.
//
// Local tensors cross as torch tensors through DLPack, without copies. Every entry that may wait for
// other ranks releases the GIL (dtensor.run_threads' ranks are threads of one interpreter).
#include <Python.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "dispatch/dispatch.h"
#include "dtensor/core/dlpack.h"
#include "dtensor/core/error.h"
#include "dtensor/dtensor.h"
#include "dtensor/dtensor_spec.h"
#include "dtensor/redistribute.h"
#include "propagation/propagate.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dtensor::python {
namespace {

// torch.from_dlpack, looked up once (never freed: it may outlive the interpreter's module teardown).
nb::handle torch_from_dlpack() {
  static PyObject* fn = nb::object(nb::module_::import_("torch").attr("from_dlpack")).release().ptr();
  return fn;
}

// A torch tensor as a dtensor Tensor viewing the same memory (detached: torch refuses to export a
// tensor that requires grad, e.g. a plain parameter passed beside bridge tensors).
Tensor import_tensor(nb::handle obj) {
  nb::object cap = obj.attr("detach")().attr("__dlpack__")();
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  if (managed == nullptr) throw nb::python_error();
  Tensor t = from_dlpack(managed);
  PyCapsule_SetName(cap.ptr(), "used_dltensor");  // consumed: its destructor leaves it alone
  return t;
}

// A dtensor Tensor as a torch tensor viewing the same memory.
nb::object export_tensor(const Tensor& t) {
  DLManagedTensor* m = to_dlpack(t);
  PyObject* cap = PyCapsule_New(m, "dltensor", [](PyObject* c) {
    // Only a capsule nobody consumed still owns its tensor.
    if (!PyCapsule_IsValid(c, "dltensor")) return;
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
    if (managed->deleter != nullptr) managed->deleter(managed);
  });
  if (cap == nullptr) {
    m->deleter(m);
    throw nb::python_error();
  }
  return torch_from_dlpack()(nb::steal(cap));
}

// str(obj), e.g. "torch.float32" for a torch.dtype.
std::string py_str(nb::handle obj) {
  nb::object s = nb::steal(PyObject_Str(obj.ptr()));
  if (!s.is_valid()) throw nb::python_error();
  return nb::cast<std::string>(s);
}

// dtensor's DType of a torch dtype ("torch.float32" -> float32).
DType torch_dtype(nb::handle dtype) { return dtype_from_name(py_str(dtype).substr(6)); }

nb::tuple shape_tuple(const Shape& s) {
  nb::list l;
  for (int64_t v : s) l.append(v);
  return nb::tuple(l);
}

// A plain value of an ATen call as dtensor's IValue (tensors are handled by the caller).
IValue value_arg(nb::handle v, const std::string& op, const std::string& what) {
  if (v.is_none()) return IValue();
  if (PyBool_Check(v.ptr())) return IValue(nb::cast<bool>(v));  // before int: bool is an int
  if (PyLong_Check(v.ptr())) return IValue(nb::cast<int64_t>(v));
  if (PyFloat_Check(v.ptr())) return IValue(nb::cast<double>(v));
  if (nb::isinstance<nb::str>(v)) return IValue(nb::cast<std::string>(v));
  if (PyList_Check(v.ptr()) || PyTuple_Check(v.ptr())) {
    std::vector<int64_t> ints;
    std::vector<double> floats;
    bool all_int = true;
    for (nb::handle e : nb::borrow<nb::sequence>(v)) {
      if (PyLong_Check(e.ptr()) && !PyBool_Check(e.ptr())) {
        ints.push_back(nb::cast<int64_t>(e));
        floats.push_back(static_cast<double>(ints.back()));
      } else if (PyFloat_Check(e.ptr())) {
        all_int = false;
        floats.push_back(nb::cast<double>(e));
      } else {
        DT_FAIL(op, ": ", what, " is a list holding a ", nb::type_name(e.type()).c_str(),
                "; accepted: sharded tensors, lists of them, None, bool, int, float, str, lists of ints or floats");
      }
    }
    if (all_int) return IValue(ints);
    return IValue(floats);
  }
  DT_FAIL(op, ": ", what, " is a ", nb::type_name(v.type()).c_str(),
          "; accepted: sharded tensors, lists of them, None, bool, int, float, str, lists of ints or floats");
}

// The engine's decision for one ATen call, with what the bridge needs to carry it out.
struct BridgePlan {
  OpCall call;
  std::shared_ptr<const ShardingDecision> decision;
  std::vector<DTensorSpec> in_specs;  // the tensor inputs' given layouts, in the call's order
  std::vector<DTensorSpec> out_specs;
  nb::list locals;   // prepare(): the tensor inputs' torch blocks, in the call's order
  nb::object mesh;   // prepare(): the Python mesh of the first sharded input (outputs keep it)

  // The inputs' locals moved to the strategy's placements; unmoved ones are returned as given.
  nb::list redistribute_given(const nb::list& locals) const {
    DT_CHECK(locals.size() == in_specs.size(), call.str(), ": ", locals.size(),
             " local tensors given for ", in_specs.size(), " tensor inputs");
    nb::list out;
    for (size_t i = 0; i < in_specs.size(); ++i) {
      const Placements& want = decision->strategy.inputs[i];
      if (in_specs[i].placements == want) {
        out.append(locals[i]);
        continue;
      }
      Tensor local = import_tensor(locals[i]);
      Tensor moved;
      {
        nb::gil_scoped_release release;  // collective
        moved = redistribute_local(local, in_specs[i], *decision->input_plans[i], default_timeout());
      }
      out.append(export_tensor(moved));
    }
    return out;
  }

  // The ATen call's args/kwargs with every tensor (positional, then keyword, lists flattened: the
  // order prepare() saw them) replaced by its block moved to the strategy's placements.
  nb::tuple local_args(nb::handle args, nb::handle kwargs) const;

  // The whole op through dtensor (redistribution, local kernel, the strategy's distributed step).
  nb::list run_given(const nb::list& locals) const {
    DT_CHECK(locals.size() == in_specs.size(), call.str(), ": ", locals.size(),
             " local tensors given for ", in_specs.size(), " tensor inputs");
    std::vector<DTensor> inputs;
    inputs.reserve(in_specs.size());
    for (size_t i = 0; i < in_specs.size(); ++i) inputs.emplace_back(in_specs[i], import_tensor(locals[i]));
    std::vector<DTensor> outs;
    {
      nb::gil_scoped_release release;  // collective
      outs = execute_strategy(call, decision->strategy, decision->out_meta, inputs, default_timeout(),
                              &decision->input_plans);
    }
    nb::list l;
    for (const DTensor& d : outs) l.append(export_tensor(d.local_tensor()));
    return l;
  }
};

// The bridge's tensor class (dtensor.bridge.DTensor), torch.Tensor and torch.dtype, set once by
// set_types(); held for the process's life.
PyObject* g_bridge_type = nullptr;
PyObject* g_torch_tensor = nullptr;
PyObject* g_torch_dtype = nullptr;

// Lowers one ATen argument of prepare(): a bridge tensor by its spec (its block appended to
// `locals`), a plain torch tensor as a replicated one (its spec made once the mesh is known), a list
// of tensors as a tensor list, a torch.dtype by dtensor's name, anything else a value.
struct Lowering {
  const std::string& op;
  std::vector<DTensorSpec> specs;
  std::vector<int> plain;  // indices into specs of plain torch tensors (replicated)
  nb::list locals;
  nb::object first;        // the first bridge tensor

  int tensor(nb::handle t) {
    if (Py_TYPE(t.ptr()) == reinterpret_cast<PyTypeObject*>(g_bridge_type)) {
      specs.push_back(nb::cast<DTensorSpec>(t.attr("_spec")));
      locals.append(t.attr("_local"));
      if (!first.is_valid()) first = nb::borrow(t);
    } else {
      DTensorSpec s;  // completed in finish()
      nb::object shape = t.attr("shape");
      for (nb::handle d : shape) s.shape.push_back(nb::cast<int64_t>(d));
      s.dtype = torch_dtype(t.attr("dtype"));
      plain.push_back(static_cast<int>(specs.size()));
      specs.push_back(std::move(s));
      locals.append(t);
    }
    return static_cast<int>(specs.size()) - 1;
  }
  static bool is_tensor(nb::handle v) { return PyObject_IsInstance(v.ptr(), g_torch_tensor) == 1; }

  ArgValue arg(nb::handle v, const std::string& what) {
    if (PyLong_Check(v.ptr()) || PyFloat_Check(v.ptr()) || v.is_none()) return value_arg(v, op, what);
    if (is_tensor(v)) return TensorRef{tensor(v)};
    if ((PyList_Check(v.ptr()) || PyTuple_Check(v.ptr())) && nb::len(v) > 0 &&
        is_tensor(nb::steal(PySequence_GetItem(v.ptr(), 0)))) {
      TensorListRef ref;
      for (nb::handle e : nb::borrow<nb::sequence>(v)) {
        DT_CHECK(is_tensor(e), op, ": ", what, " mixes tensors and other values; accepted: a list of tensors");
        ref.indices.push_back(tensor(e));
      }
      return ref;
    }
    if (Py_TYPE(v.ptr()) == reinterpret_cast<PyTypeObject*>(g_torch_dtype))
      return IValue(std::string(dtype_name(torch_dtype(v))));
    return value_arg(v, op, what);
  }

  void finish() {
    DT_CHECK(first.is_valid(), op, ": no sharded tensor among the arguments");
    MeshPtr mesh;
    for (const DTensorSpec& s : specs) {
      if (s.mesh) {
        mesh = s.mesh;
        break;
      }
    }
    for (int i : plain)
      specs[i] = DTensorSpec(mesh, Placements(mesh->ndim(), Replicate()), specs[i].shape, specs[i].dtype);
  }
};

BridgePlan prepare_call(const std::string& name, const nb::sequence& args, const nb::dict& kwargs) {
  init_ops();
  DT_CHECK(g_bridge_type != nullptr, "bridge: set_types() was not called");
  Lowering low{name, {}, {}, nb::list(), nb::object()};
  std::vector<ArgValue> pos;
  size_t i = 0;
  for (nb::handle a : args) pos.push_back(low.arg(a, "argument " + std::to_string(i++)));
  std::vector<std::pair<std::string, ArgValue>> kw;
  for (auto [k, v] : kwargs) {
    std::string key = nb::cast<std::string>(k);
    kw.emplace_back(key, low.arg(v, "argument '" + key + "'"));
  }
  low.finish();
  std::vector<TensorMeta> metas;
  std::vector<Placements> placements;
  const MeshPtr mesh = low.specs[0].mesh;
  for (const DTensorSpec& s : low.specs) {
    DT_CHECK(s.mesh->same_as(*mesh), name, ": inputs on different meshes: ", low.specs[0].str(), " and ",
             s.str(), "; accepted: every sharded input on one mesh");
    metas.push_back({s.shape, s.dtype});
    placements.push_back(s.placements);
  }
  BridgePlan p{OpCall::bind_overload(name, pos, kw, metas, placements, mesh->shape()), nullptr,
               std::move(low.specs), {}, low.locals, low.first.attr("_mesh")};
  p.decision = propagate(p.call);
  const Strategy& s = p.decision->strategy;
  for (size_t o = 0; o < s.outputs.size(); ++o)
    p.out_specs.emplace_back(mesh, s.outputs[o], p.decision->out_meta[o].shape, p.decision->out_meta[o].dtype);
  return p;
}

nb::object substitute(nb::handle a, const nb::list& moved, size_t& next) {
  if (Lowering::is_tensor(a)) return moved[next++];
  if ((PyList_Check(a.ptr()) || PyTuple_Check(a.ptr())) && nb::len(a) > 0 &&
      Lowering::is_tensor(nb::steal(PySequence_GetItem(a.ptr(), 0)))) {
    nb::list l;
    for (size_t i = 0, n = nb::len(a); i < n; ++i) l.append(moved[next++]);
    return l;
  }
  return nb::borrow(a);
}

nb::tuple BridgePlan::local_args(nb::handle args, nb::handle kwargs) const {
  nb::list moved = redistribute_given(locals);
  size_t next = 0;
  nb::list largs;
  for (nb::handle a : nb::borrow<nb::sequence>(args)) largs.append(substitute(a, moved, next));
  nb::dict lkw;
  for (auto [k, v] : nb::borrow<nb::dict>(kwargs)) lkw[k] = substitute(v, moved, next);
  return nb::make_tuple(largs, lkw);
}

// Wraps torch's output blocks as bridge tensors with the plan's output specs. Checks each block's
// shape against the engine's (a global-shape argument left unlocalized shows here); torch's dtype
// wins over the engine's where their promotion rules differ.
nb::object wrap_outputs(const BridgePlan& p, nb::handle out) {
  const bool single = PyObject_IsInstance(out.ptr(), g_torch_tensor) == 1;
  std::vector<nb::object> outs;
  if (single) {
    outs.push_back(nb::borrow(out));
  } else {
    for (nb::handle o : nb::borrow<nb::sequence>(out)) outs.push_back(nb::borrow(o));
  }
  DT_CHECK(outs.size() == p.out_specs.size(), "bridge: ", p.call.str(), ": torch returned ", outs.size(),
           " outputs, dtensor's op has ", p.out_specs.size());
  nb::handle cls(g_bridge_type);
  nb::list wrapped;
  for (size_t o = 0; o < outs.size(); ++o) {
    DTensorSpec spec = p.out_specs[o];
    const Shape local = spec.local_shape();
    nb::object shape = outs[o].attr("shape");
    DT_CHECK(shape.equal(shape_tuple(local)), "bridge: ", p.call.str(), ": torch's kernel gave a block of shape ",
             py_str(shape), " where the engine's output ", spec.str(), " has ",
             shape_str(local), " on this rank (an argument that depends on the global shape is not "
             "localized for this op)");
    const DType dt = torch_dtype(outs[o].attr("dtype"));
    if (dt != spec.dtype) spec = DTensorSpec(spec.mesh, spec.placements, spec.shape, dt);
    wrapped.append(cls(outs[o], nb::cast(std::move(spec), nb::rv_policy::move), p.mesh));
  }
  if (single) return wrapped[0];
  if (PyTuple_Check(out.ptr())) return nb::tuple(wrapped);
  return wrapped;
}

}  // namespace

void bind_bridge(nb::module_& m) {
  nb::module_ b = m.def_submodule("_bridge", "native half of dtensor.bridge (torch_bridge.py)");

  nb::class_<DTensorSpec>(b, "Spec", "A sharded tensor's layout: mesh, placements, global shape, dtype.")
      .def_prop_ro("placements", [](const DTensorSpec& s) {
        nb::list l;
        for (const Placement& p : s.placements) l.append(nb::cast(p));
        return nb::tuple(l);
      })
      .def_prop_ro("shape", [](const DTensorSpec& s) { return shape_tuple(s.shape); })
      .def_prop_ro("local_shape", [](const DTensorSpec& s) { return shape_tuple(s.local_shape()); })
      .def_prop_ro("dtype", [](const DTensorSpec& s) { return std::string(dtype_name(s.dtype)); })
      .def_prop_ro("has_partial", &DTensorSpec::has_partial)
      // The same layout with other placements, shape or dtype (e.g. a plain tensor made replicated).
      .def("with_", [](const DTensorSpec& s, std::vector<Placement> placements, std::vector<int64_t> shape,
                       const std::string& dtype) {
        return DTensorSpec(s.mesh, Placements(placements.begin(), placements.end()),
                           Shape(shape.begin(), shape.end()), dtype_from_name(dtype));
      }, "placements"_a, "shape"_a, "dtype"_a)
      .def("__eq__", [](const DTensorSpec& a, const DTensorSpec& c) { return a == c; })
      .def("__repr__", &DTensorSpec::str);

  b.def("spec_of", [](const DTensor& d) { return d.spec(); }, "A dtensor.DTensor's layout.");
  b.def("local_of", [](const DTensor& d) { return export_tensor(d.local_tensor()); },
        "A dtensor.DTensor's local block as a torch tensor sharing its memory.");
  b.def("to_dtensor", [](const DTensorSpec& s, nb::handle local) { return DTensor(s, import_tensor(local)); },
        "A dtensor.DTensor of this layout over a torch local block (no copy).");
  b.def("redistribute", [](const DTensorSpec& s, nb::handle local, std::vector<Placement> placements) {
    Tensor t = import_tensor(local);
    Placements dst(placements.begin(), placements.end());
    DTensorSpec out(s.mesh, dst, s.shape, s.dtype);
    Tensor moved;
    {
      nb::gil_scoped_release release;  // collective
      moved = redistribute_local(t, s, *plan_redistribute(s, out.placements), default_timeout());
    }
    return nb::make_tuple(out, export_tensor(moved));
  }, "spec"_a, "local"_a, "placements"_a, "(new spec, new local): the block moved to `placements`.");

  nb::class_<BridgePlan>(b, "Plan", "The engine's decision for one ATen call.")
      .def_prop_ro("op", [](const BridgePlan& p) { return p.call.op().name(); })
      .def_prop_ro("strategy", [](const BridgePlan& p) { return p.decision->strategy.str(); })
      .def_prop_ro("has_step", [](const BridgePlan& p) { return p.decision->strategy.step() != 0; })
      .def_prop_ro("outputs", [](const BridgePlan& p) { return p.out_specs; })
      .def_prop_ro("input_placements", [](const BridgePlan& p) {
        nb::list l;
        for (const Placements& ps : p.decision->strategy.inputs) {
          nb::list one;
          for (const Placement& q : ps) one.append(nb::cast(q));
          l.append(nb::tuple(one));
        }
        return l;
      })
      .def("redistribute", [](const BridgePlan& p) { return p.redistribute_given(p.locals); },
           "The tensor inputs' blocks (torch, in the call's order) moved to the strategy's placements.")
      .def("run", [](const BridgePlan& p) { return wrap_outputs(p, p.run_given(p.locals)); },
           "Runs the whole op through dtensor (redistribution, dtensor's kernel or distributed step); "
           "returns the outputs as bridge tensors (a list).")
      .def("local_args", &BridgePlan::local_args, "args"_a, "kwargs"_a,
           "(args, kwargs) of the ATen call with every tensor replaced by its moved block.")
      .def("wrap", &wrap_outputs, "out"_a,
           "torch's output block(s) as bridge tensors with the engine's output layouts.");

  b.def("set_types", [](nb::handle bridge_tensor, nb::handle torch_tensor, nb::handle torch_dtype) {
    g_bridge_type = nb::borrow(bridge_tensor).release().ptr();
    g_torch_tensor = nb::borrow(torch_tensor).release().ptr();
    g_torch_dtype = nb::borrow(torch_dtype).release().ptr();
  }, "The bridge's tensor class, torch.Tensor and torch.dtype (once, at import).");
  b.def("prepare", &prepare_call, "name"_a, "args"_a, "kwargs"_a,
        "The engine's decision for the registered op `name` on an ATen call's args/kwargs (bridge "
        "tensors, plain torch tensors taken as replicated, values).");
}

}  // namespace dtensor::python
