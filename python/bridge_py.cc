// dtensor._dtensor._bridge: the native half of dtensor.bridge (python/dtensor/torch_bridge.py), the
// torch tensor subclass through which PyTorch code runs on sharded tensors (DESIGN §9). For one ATen
// call the bridge asks this module for the engine's decision (the same cached propagate() as
// call_op), redistributes the inputs to the chosen strategy here, and lets torch's ATen kernel
// compute on the local shards; when the strategy carries a distributed step (DESIGN §6) the whole op
// runs here instead (execute_strategy), since ATen has no such step. torch_dispatch() is the
// bridge's __torch_dispatch__ itself: the common path (a plain engine op) is one native call per op,
// with the Python handlers of torch_bridge.py called for the rest.
//
// Local tensors cross as torch tensors through DLPack, without copies. Every entry that may wait for
// other ranks releases the GIL (dtensor.run_threads' ranks are threads of one interpreter).
#include <Python.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
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
#include "python/py_values.h"

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

// dtensor's DType of a torch dtype ("torch.float32" -> float32). torch.dtype objects are
// singletons, so the name is parsed once per dtype (the map is touched under the GIL only).
DType torch_dtype(nb::handle dtype) {
  static auto* seen = new std::unordered_map<PyObject*, DType>();  // never freed: outlives teardown
  auto it = seen->find(dtype.ptr());
  if (it != seen->end()) return it->second;
  const DType d = dtype_from_name(py_str(dtype).substr(6));
  seen->emplace(nb::borrow(dtype).release().ptr(), d);
  return d;
}

// Attribute names the per-op path reads, interned once by set_types() (no string made per lookup).
struct Names {
  PyObject *spec, *local, *mesh, *shape, *dtype, *device;
};
Names g_names{};

nb::object get(nb::handle obj, PyObject* name) {
  PyObject* r = PyObject_GetAttr(obj.ptr(), name);
  if (r == nullptr) throw nb::python_error();
  return nb::steal(r);
}

nb::tuple shape_tuple(const Shape& s) {
  nb::list l;
  for (int64_t v : s) l.append(v);
  return nb::tuple(l);
}

// Which argument of the call a value is, spelled out only for an error message.
struct ArgName {
  size_t index;
  const std::string* key;  // a keyword argument's name, else null
  std::string str() const { return key ? "argument '" + *key + "'" : "argument " + std::to_string(index); }
};

// A plain value of an ATen call as dtensor's IValue (tensors are handled by the caller).
IValue value_arg(nb::handle v, const std::string& op, const ArgName& what) {
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
      if (!append_number(e, &ints, &floats, &all_int)) {
        DT_FAIL(op, ": ", what.str(), " is a list holding a ", nb::type_name(e.type()).c_str(),
                "; accepted: sharded tensors, lists of them, None, bool, int, float, str, lists of ints or floats");
      }
    }
    if (all_int) return IValue(ints);
    return IValue(floats);
  }
  DT_FAIL(op, ": ", what.str(), " is a ", nb::type_name(v.type()).c_str(),
          "; accepted: sharded tensors, lists of them, None, bool, int, float, str, lists of ints or floats");
}

// One output of a decision as the bridge wraps it: its spec as a Python object (shared by every
// output made with it: specs are immutable), the wrapper's global size and contiguous strides, and
// the block shape torch's kernel must give on this rank.
struct OutLayout {
  nb::object spec;
  nb::object shape;
  nb::object strides;
  Shape local;
  DType dtype;
};
using OutLayouts = std::vector<OutLayout>;

// The engine's decision for one ATen call: what depends on the inputs' layouts and the values only,
// so the native dispatch may reuse it for a call with the same spec objects and values.
struct Prepared {
  OpCall call;
  std::shared_ptr<const ShardingDecision> decision;
  std::vector<DTensorSpec> in_specs;  // the tensor inputs' given layouts, in the call's order
  std::vector<DTensorSpec> out_specs;
  std::shared_ptr<const OutLayouts> layouts;  // out_specs as wrapped, cached per (decision, mesh)
  bool moves = false;  // an input is redistributed
};

// A Prepared decision with this call's blocks, carried out by the bridge.
struct BridgePlan {
  std::shared_ptr<const Prepared> prep;
  nb::list locals;   // the tensor inputs' torch blocks, in the call's order
  nb::object mesh;   // the Python mesh of the first sharded input (outputs keep it)

  // The inputs' locals moved to the strategy's placements; unmoved ones are returned as given.
  nb::list redistribute_given(const nb::list& locals) const {
    DT_CHECK(locals.size() == prep->in_specs.size(), prep->call.str(), ": ", locals.size(),
             " local tensors given for ", prep->in_specs.size(), " tensor inputs");
    if (!needs_moves()) return locals;  // the common case: no list built
    nb::list out;
    for (size_t i = 0; i < prep->in_specs.size(); ++i) {
      const Placements& want = prep->decision->strategy.inputs[i];
      if (prep->in_specs[i].placements == want) {
        out.append(locals[i]);
        continue;
      }
      Tensor local = import_tensor(locals[i]);
      Tensor moved;
      {
        nb::gil_scoped_release release;  // collective
        moved = redistribute_local(local, prep->in_specs[i], *prep->decision->input_plans[i], default_timeout());
      }
      out.append(export_tensor(moved));
    }
    return out;
  }

  bool needs_moves() const { return prep->moves; }

  // The ATen call's args/kwargs with every tensor (positional, then keyword, lists flattened: the
  // order prepare() saw them) replaced by its block moved to the strategy's placements.
  nb::tuple local_args(nb::handle args, nb::handle kwargs) const;

  // The whole op through dtensor (redistribution, local kernel, the strategy's distributed step).
  nb::list run_given(const nb::list& locals) const {
    DT_CHECK(locals.size() == prep->in_specs.size(), prep->call.str(), ": ", locals.size(),
             " local tensors given for ", prep->in_specs.size(), " tensor inputs");
    std::vector<DTensor> inputs;
    inputs.reserve(prep->in_specs.size());
    for (size_t i = 0; i < prep->in_specs.size(); ++i) inputs.emplace_back(prep->in_specs[i], import_tensor(locals[i]));
    std::vector<DTensor> outs;
    {
      nb::gil_scoped_release release;  // collective
      outs = execute_strategy(prep->call, prep->decision->strategy, prep->decision->out_meta, inputs, default_timeout(),
                              &prep->decision->input_plans);
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
      specs.push_back(nb::cast<const DTensorSpec&>(get(t, g_names.spec)));
      locals.append(get(t, g_names.local));
      if (!first.is_valid()) first = nb::borrow(t);
    } else {
      DTensorSpec s;  // completed in finish()
      nb::object shape = get(t, g_names.shape);
      for (nb::handle d : shape) s.shape.push_back(nb::cast<int64_t>(d));
      s.dtype = torch_dtype(get(t, g_names.dtype));
      plain.push_back(static_cast<int>(specs.size()));
      specs.push_back(std::move(s));
      locals.append(t);
    }
    return static_cast<int>(specs.size()) - 1;
  }
  static bool is_tensor(nb::handle v) {
    PyObject* t = reinterpret_cast<PyObject*>(Py_TYPE(v.ptr()));
    return t == g_bridge_type || t == g_torch_tensor || PyObject_IsInstance(v.ptr(), g_torch_tensor) == 1;
  }
  // A list or tuple whose first entry that is not None is a tensor (Tensor[], or Tensor?[] as
  // index.Tensor's [None, i]).
  static bool is_tensor_list(nb::handle v) {
    if (!PyList_Check(v.ptr()) && !PyTuple_Check(v.ptr())) return false;
    for (nb::handle e : nb::borrow<nb::sequence>(v))
      if (!e.is_none()) return is_tensor(e);
    return false;
  }

  ArgValue arg(nb::handle v, const ArgName& what) {
    if (PyLong_Check(v.ptr()) || PyFloat_Check(v.ptr()) || v.is_none()) return value_arg(v, op, what);
    if (is_tensor(v)) return TensorRef{tensor(v)};
    if (is_tensor_list(v)) {
      TensorListRef ref;
      for (nb::handle e : nb::borrow<nb::sequence>(v)) {
        if (e.is_none()) {  // a Tensor?[] entry (index.Tensor's x[:, i]); OpCall::bind refuses it elsewhere
          ref.indices.push_back(TensorListRef::kNoTensor);
          continue;
        }
        DT_CHECK(is_tensor(e), op, ": ", what.str(), " mixes tensors and ", nb::type_name(e.type()).c_str(),
                 "; accepted: a list of tensors (and None entries for a Tensor?[] argument)");
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

// Empties the native caches' Python references (release_caches(), at interpreter exit).
std::vector<void (*)()> g_release;

// Contiguous strides of a global shape (the wrapper claims them; torch never reads its storage).
nb::tuple contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = acc;
    acc *= std::max<int64_t>(shape[d], 1);
  }
  return shape_tuple(strides);
}

// The outputs of a decision on one mesh, made once: repeated ops reuse the spec objects and size
// tuples. Keyed by the decision and the mesh (decisions are shared by meshes of one shape; the
// entry holds both, so neither address is reused while it lives). Touched under the GIL only. A
// data-dependent output dim (OpDef::data_dependent) holds meta's bound here: wrap_outputs replaces
// these layouts per call (settled_layouts), so no size is reused from an earlier call.
std::shared_ptr<const OutLayouts> out_layouts(const std::shared_ptr<const ShardingDecision>& decision,
                                              const MeshPtr& mesh) {
  struct Entry {
    std::shared_ptr<const ShardingDecision> decision;
    MeshPtr mesh;
    std::shared_ptr<const OutLayouts> layouts;
  };
  struct Hash {
    size_t operator()(const std::pair<const void*, const void*>& k) const {
      return std::hash<const void*>()(k.first) * 31 + std::hash<const void*>()(k.second);
    }
  };
  // Emptied by release_caches() at exit (its Python objects must go before the interpreter).
  static auto* cache = new std::unordered_map<std::pair<const void*, const void*>, Entry, Hash>();
  static bool hooked = (g_release.push_back([] { cache->clear(); }), true);
  (void)hooked;
  const std::pair<const void*, const void*> key{decision.get(), mesh.get()};
  auto it = cache->find(key);
  if (it != cache->end()) return it->second.layouts;
  auto layouts = std::make_shared<OutLayouts>();
  const Strategy& s = decision->strategy;
  for (size_t o = 0; o < s.outputs.size(); ++o) {
    const TensorMeta& m = decision->out_meta[o];
    DTensorSpec spec(mesh, s.outputs[o], m.shape, m.dtype);
    Shape local = spec.local_shape();
    layouts->push_back({nb::cast(std::move(spec), nb::rv_policy::move), shape_tuple(m.shape),
                        contiguous_strides(m.shape), std::move(local), m.dtype});
  }
  if (cache->size() >= 4096) cache->clear();  // a bound; the propagation cache keeps decisions
  cache->emplace(key, Entry{decision, mesh, layouts});
  return layouts;
}

BridgePlan prepare_call(const std::string& name, const nb::sequence& args, const nb::dict& kwargs) {
  init_ops();
  DT_CHECK(g_bridge_type != nullptr, "bridge: set_types() was not called");
  Lowering low{name, {}, {}, nb::list(), nb::object()};
  std::vector<ArgValue> pos;
  size_t i = 0;
  for (nb::handle a : args) pos.push_back(low.arg(a, ArgName{i++, nullptr}));
  std::vector<std::pair<std::string, ArgValue>> kw;
  for (auto [k, v] : kwargs) {
    std::string key = nb::cast<std::string>(k);
    ArgValue value = low.arg(v, ArgName{0, &key});
    kw.emplace_back(std::move(key), std::move(value));
  }
  low.finish();
  std::vector<const DTensorSpec*> specs;
  for (const DTensorSpec& s : low.specs) specs.push_back(&s);
  auto prep = std::make_shared<Prepared>();
  prep->call = bind_call(name, pos, kw, specs);  // dispatch's binding step, shared with call_op
  const MeshPtr mesh = low.specs[0].mesh;
  prep->decision = propagate(prep->call);
  prep->in_specs = std::move(low.specs);
  prep->layouts = out_layouts(prep->decision, mesh);
  for (const OutLayout& l : *prep->layouts) prep->out_specs.push_back(nb::cast<const DTensorSpec&>(l.spec));
  for (size_t t = 0; t < prep->in_specs.size(); ++t)
    prep->moves |= !(prep->in_specs[t].placements == prep->decision->strategy.inputs[t]);
  return BridgePlan{std::move(prep), low.locals, get(low.first, g_names.mesh)};
}

nb::object substitute(nb::handle a, const nb::list& moved, size_t& next) {
  if (Lowering::is_tensor(a)) return moved[next++];
  if (Lowering::is_tensor_list(a)) {
    nb::list l;
    for (nb::handle e : nb::borrow<nb::sequence>(a)) l.append(e.is_none() ? nb::none() : moved[next++]);
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

// torch.Tensor._make_wrapper_subclass and torch.strided (set_types()); the hot path calls the
// former directly instead of going through the class's Python __new__.
PyObject* g_make_wrapper = nullptr;
PyObject* g_strided = nullptr;

// A bridge tensor over `local` (no autograd history: dispatch runs below autograd). Positional
// arguments of _make_wrapper_subclass: cls, size, strides, storage_offset, memory_format, dtype,
// layout, device, pin_memory, requires_grad.
nb::object make_wrapper(nb::handle local, nb::handle spec, nb::handle shape, nb::handle strides,
                        nb::handle dtype, nb::handle mesh) {
  nb::object device = get(local, g_names.device);
  PyObject* argv[] = {g_bridge_type, shape.ptr(), strides.ptr(), Py_None, Py_None, dtype.ptr(),
                      g_strided, device.ptr(), Py_False, Py_False};
  nb::object r = nb::steal(PyObject_Vectorcall(g_make_wrapper, argv, 10, nullptr));
  if (!r.is_valid() || PyObject_SetAttr(r.ptr(), g_names.local, local.ptr()) != 0 ||
      PyObject_SetAttr(r.ptr(), g_names.spec, spec.ptr()) != 0 ||
      PyObject_SetAttr(r.ptr(), g_names.mesh, mesh.ptr()) != 0)
    throw nb::python_error();
  return r;
}

// Whether torch's block shape (a torch.Size, a tuple) is `want`.
bool same_shape(nb::handle size, const Shape& want) {
  if (!PyTuple_Check(size.ptr()) || PyTuple_GET_SIZE(size.ptr()) != static_cast<Py_ssize_t>(want.size()))
    return false;
  for (size_t d = 0; d < want.size(); ++d)
    if (PyLong_AsLongLong(PyTuple_GET_ITEM(size.ptr(), d)) != want[d]) return false;
  return true;
}

// The output layouts of an op with data-dependent output dims (OpDef::data_dependent) from this
// call's blocks (`items`, n of them): the cached layouts hold meta's bound for those dims.
std::shared_ptr<const OutLayouts> settled_layouts(const BridgePlan& p, PyObject** items, size_t n) {
  const ShardingDecision& d = *p.prep->decision;
  std::vector<Shape> local;
  for (size_t o = 0; o < n; ++o) {
    Shape s;
    if (nb::handle(items[o]).is_none()) {
      s = (*p.prep->layouts)[o].local;
    } else {
      for (nb::handle x : get(nb::handle(items[o]), g_names.shape)) s.push_back(nb::cast<int64_t>(x));
    }
    local.push_back(std::move(s));
  }
  const std::vector<TensorMeta> metas = settle_output_meta(p.prep->call, d.strategy.outputs, d.out_meta, local);
  auto layouts = std::make_shared<OutLayouts>();
  for (size_t o = 0; o < n; ++o) {
    DTensorSpec spec(p.prep->out_specs[o].mesh, d.strategy.outputs[o], metas[o].shape, metas[o].dtype);
    Shape block = spec.local_shape();
    layouts->push_back({nb::cast(std::move(spec), nb::rv_policy::move), shape_tuple(metas[o].shape),
                        contiguous_strides(metas[o].shape), std::move(block), metas[o].dtype});
  }
  return layouts;
}

// Wraps torch's output blocks as bridge tensors with the plan's output specs. Checks each block's
// shape against the engine's (a global-shape argument left unlocalized shows here); torch's dtype
// wins over the engine's where their promotion rules differ.
nb::object wrap_outputs(const BridgePlan& p, nb::handle out) {
  const bool single = Lowering::is_tensor(out);
  PyObject* one[1] = {out.ptr()};
  nb::object seq;  // a tuple/list result, as a fast sequence
  PyObject** items = one;
  size_t n = 1;
  if (!single) {
    seq = nb::steal(PySequence_Fast(out.ptr(), "bridge: torch's kernel returned neither a tensor nor a sequence"));
    if (!seq.is_valid()) throw nb::python_error();
    items = PySequence_Fast_ITEMS(seq.ptr());
    n = static_cast<size_t>(PySequence_Fast_GET_SIZE(seq.ptr()));
  }
  std::shared_ptr<const OutLayouts> settled;  // a data-dependent shape: this call's own layouts
  if (!p.prep->call.op().data_dependent.empty() && n == p.prep->layouts->size()) settled = settled_layouts(p, items, n);
  const OutLayouts& layouts = settled ? *settled : *p.prep->layouts;
  DT_CHECK(n == layouts.size(), "bridge: ", p.prep->call.str(), ": torch returned ", n,
           " outputs, dtensor's op has ", layouts.size());
  nb::object first;
  nb::object wrapped = single ? nb::object() : nb::steal(PyTuple_New(static_cast<Py_ssize_t>(n)));
  for (size_t o = 0; o < n; ++o) {
    nb::handle block(items[o]);
    if (!single && block.is_none()) {  // an output torch's output_mask left out (a backward op's)
      PyTuple_SET_ITEM(wrapped.ptr(), static_cast<Py_ssize_t>(o), nb::none().release().ptr());
      continue;
    }
    const OutLayout& l = layouts[o];
    nb::object shape = get(block, g_names.shape);
    DT_CHECK(same_shape(shape, l.local), "bridge: ", p.prep->call.str(), ": torch's kernel gave a block of shape ",
             py_str(shape), " where the engine's output ", nb::cast<const DTensorSpec&>(l.spec).str(), " has ",
             shape_str(l.local), " on this rank (an argument that depends on the global shape is not "
             "localized for this op)");
    nb::object dtype = get(block, g_names.dtype);
    const DType dt = torch_dtype(dtype);
    nb::object spec = l.spec;
    if (dt != l.dtype) {
      const DTensorSpec& s = nb::cast<const DTensorSpec&>(l.spec);
      spec = nb::cast(DTensorSpec(s.mesh, s.placements, s.shape, dt), nb::rv_policy::move);
    }
    nb::object w = make_wrapper(block, spec, l.shape, l.strides, dtype, p.mesh);
    if (single) return w;
    PyTuple_SET_ITEM(wrapped.ptr(), static_cast<Py_ssize_t>(o), w.release().ptr());
  }
  if (PyTuple_Check(out.ptr())) return wrapped;
  return nb::steal(PySequence_List(wrapped.ptr()));
}

// One OpOverload as the native __torch_dispatch__ runs it, resolved once by torch_bridge's
// _native_entry(func): either an engine op torch's kernel computes (`name`, the registered op; `call`,
// the overload's C++ callable) or a Python handler for everything else (adapt, localize, bridge
// bookkeeping, decompositions, errors).
struct OpEntry {
  nb::object func;     // held: the map is keyed by its address
  nb::object handler;  // valid: the Python handler runs the op
  std::string name;
  bool dtensor_kernel = false;  // a layout-dependent kernel: dtensor's runs the whole op
  nb::object call;              // run on the blocks (the overload's, or a replacement such as reshape)
  int keep = -1;                // >= 0: the engine sees the first `keep` positional args, no keywords
  bool local_size = false;      // args[1] is a global size: the output's block shape replaces it
  // Positional args the op takes as tensors: a Python number there (torch's wrapped number, as in
  // `x - 1`) sends the call to `fallback`, the Python handler, which makes it a 0-d tensor.
  std::vector<int> tensor_slots;
  nb::object fallback;
  // Keyword arguments of the ATen overload that dtensor's op lacks (sum's dtype, round's
  // decimals): a call passing one (not None) goes to `fallback` too, which casts or decomposes.
  std::vector<std::string> python_kwargs;
};

PyObject* g_resolve = nullptr;  // torch_bridge._native_entry, set by set_types()

const OpEntry& op_entry(nb::handle func) {
  // Never erased while the bridge runs (OpOverloads live as long as torch): references stay
  // valid; emptied by release_caches() at exit.
  static auto* ops = new std::unordered_map<PyObject*, OpEntry>();
  static bool hooked = (g_release.push_back([] { ops->clear(); }), true);
  (void)hooked;
  auto it = ops->find(func.ptr());
  if (it != ops->end()) return it->second;
  nb::object r = nb::steal(PyObject_CallOneArg(g_resolve, func.ptr()));
  if (!r.is_valid()) throw nb::python_error();
  OpEntry e;
  e.func = nb::borrow(func);
  if (PyTuple_Check(r.ptr())) {
    e.name = nb::cast<std::string>(r[0]);
    e.dtensor_kernel = nb::cast<bool>(r[1]);
    e.call = r[2];
    e.keep = nb::cast<int>(r[3]);
    e.local_size = nb::cast<bool>(r[4]);
    e.tensor_slots = nb::cast<std::vector<int>>(r[5]);
    e.fallback = r[6];
    e.python_kwargs = nb::cast<std::vector<std::string>>(r[7]);
  } else {
    e.handler = r;
  }
  return ops->emplace(func.ptr(), std::move(e)).first->second;  // a nested resolve may have added it
}

// A call whose decision the native dispatch reuses: the overload, then per positional argument a
// bridge tensor's spec object or a plain scalar's value (no keywords). Specs are immutable and the
// cache holds the ones in its keys, so an address stands for one layout while it is cached.
struct CallKey {
  std::vector<uint64_t> words;
  bool operator==(const CallKey& o) const { return words == o.words; }
};
struct CallKeyHash {
  size_t operator()(const CallKey& k) const {
    size_t h = 0;
    for (uint64_t w : k.words) h = (h * 1000003) ^ std::hash<uint64_t>()(w);
    return h;
  }
};
struct CachedCall {
  std::vector<nb::object> held;  // the key's spec objects
  std::shared_ptr<const Prepared> prep;
};

// prepare_call(), skipped when the same overload saw the same spec objects and values before: in a
// loop, outputs carry the cached layouts' spec objects, so a program's ops hit after one pass.
BridgePlan prepare_cached(const OpEntry& e, nb::handle func, const nb::sequence& a, const nb::dict& kw) {
  // Emptied by release_caches() at exit (its Python objects must go before the interpreter).
  static auto* cache = new std::unordered_map<CallKey, CachedCall, CallKeyHash>();
  static bool hooked = (g_release.push_back([] { cache->clear(); }), true);
  (void)hooked;
  if (kw.size() != 0 || !PyTuple_Check(a.ptr())) return prepare_call(e.name, a, kw);
  const Py_ssize_t n = PyTuple_GET_SIZE(a.ptr());
  CallKey key;
  key.words.reserve(1 + 2 * static_cast<size_t>(n));
  key.words.push_back(reinterpret_cast<uint64_t>(func.ptr()));
  nb::list locals;
  std::vector<nb::object> specs;
  PyObject* first = nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* v = PyTuple_GET_ITEM(a.ptr(), i);
    if (reinterpret_cast<PyObject*>(Py_TYPE(v)) == g_bridge_type) {
      nb::object spec = get(v, g_names.spec);
      key.words.insert(key.words.end(), {0, reinterpret_cast<uint64_t>(spec.ptr())});
      specs.push_back(std::move(spec));
      locals.append(get(v, g_names.local));
      if (first == nullptr) first = v;
    } else if (PyBool_Check(v)) {
      key.words.insert(key.words.end(), {1, v == Py_True ? 1u : 0u});
    } else if (PyLong_CheckExact(v)) {
      int overflow = 0;
      const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
      if (overflow != 0) return prepare_call(e.name, a, kw);
      key.words.insert(key.words.end(), {2, static_cast<uint64_t>(x)});
    } else if (PyFloat_CheckExact(v)) {
      const double x = PyFloat_AS_DOUBLE(v);
      uint64_t bits;
      std::memcpy(&bits, &x, sizeof bits);
      key.words.insert(key.words.end(), {3, bits});
    } else if (v == Py_None) {
      key.words.insert(key.words.end(), {4, 0});
    } else {
      return prepare_call(e.name, a, kw);  // plain tensors, lists, dtypes...: lowered every time
    }
  }
  if (first == nullptr) return prepare_call(e.name, a, kw);  // raises, naming the op
  auto it = cache->find(key);
  if (it != cache->end()) return BridgePlan{it->second.prep, std::move(locals), get(first, g_names.mesh)};
  BridgePlan p = prepare_call(e.name, a, kw);
  if (cache->size() >= 8192) cache->clear();  // a bound; a steady program holds far fewer
  cache->emplace(std::move(key), CachedCall{std::move(specs), p.prep});
  return p;
}

// dtensor.bridge.DTensor.__torch_dispatch__ (installed as a classmethod): one native call per ATen
// op on the common path (lowering, cached propagation, redistribution, torch's kernel on the blocks
// through the Python C API, output wrappers); Python handlers for the rest.
nb::object torch_dispatch(nb::handle /*cls*/, nb::handle func, nb::handle /*types*/, nb::handle args,
                          nb::handle kwargs) {
  DT_CHECK(g_resolve != nullptr, "bridge: set_types() was not called");
  const OpEntry& e = op_entry(func);
  nb::dict kw = kwargs.is_none() ? nb::dict() : nb::borrow<nb::dict>(kwargs);
  nb::sequence a = nb::borrow<nb::sequence>(args.is_none() ? nb::tuple() : nb::borrow(args));
  if (e.handler.is_valid()) return e.handler(func, a, kw);
  for (int i : e.tensor_slots) {
    if (i >= static_cast<int>(nb::len(a))) break;
    PyObject* v = PySequence_Fast_GET_ITEM(a.ptr(), i);
    if (PyLong_Check(v) || PyFloat_Check(v)) return e.fallback(func, a, kw);
  }
  // A complex Python number (mul.Scalar(x, 1j)): dtensor's IValue holds no complex (ops/ivalue.h);
  // the Python handler runs the call as the Tensor overload with a 0-d complex tensor.
  for (Py_ssize_t i = 0, n = PySequence_Fast_GET_SIZE(a.ptr()); i < n; ++i)
    if (PyComplex_Check(PySequence_Fast_GET_ITEM(a.ptr(), i))) return e.fallback(func, a, kw);
  for (const std::string& k : e.python_kwargs) {
    PyObject* v = PyDict_GetItemString(kw.ptr(), k.c_str());  // borrowed
    if (v != nullptr && v != Py_None) return e.fallback(func, a, kw);
  }
  nb::object kept;  // the engine's args where the ATen op has more (softmax's half_to_float)
  if (e.keep >= 0) {
    kept = nb::steal(PySequence_GetSlice(a.ptr(), 0, e.keep));
    if (!kept.is_valid()) throw nb::python_error();
  }
  BridgePlan p = e.keep < 0 ? prepare_cached(e, func, a, kw)
                            : prepare_cached(e, func, nb::borrow<nb::sequence>(kept), nb::dict());
  if (e.dtensor_kernel || p.prep->decision->strategy.step() != 0) {
    // dtensor's own distributed step (DESIGN §6) or a layout-dependent kernel: ATen cannot run it
    // on the block, dtensor's kernel does.
    nb::list outs = nb::borrow<nb::list>(wrap_outputs(p, p.run_given(p.locals)));
    if (outs.size() == 1) return outs[0];
    return nb::tuple(outs);
  }
  nb::list moved = p.redistribute_given(p.locals);
  size_t next = 0;
  const size_t n = nb::len(a);
  nb::object largs = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(n)));
  for (size_t i = 0; i < n; ++i) {
    nb::object v = substitute(a[i], moved, next);
    if (i == 1 && e.local_size) {  // view/reshape/expand: on a block the size is the output's block shape
      nb::list local;
      for (int64_t d : (*p.prep->layouts)[0].local) local.append(d);
      v = std::move(local);
    }
    PyTuple_SET_ITEM(largs.ptr(), static_cast<Py_ssize_t>(i), v.release().ptr());
  }
  nb::object lkw;
  if (kw.size() > 0) {
    nb::dict d;
    for (auto [k, v] : kw) d[k] = substitute(v, moved, next);
    lkw = d;
  }
  nb::object out = nb::steal(PyObject_Call(e.call.ptr(), largs.ptr(), lkw.is_valid() ? lkw.ptr() : nullptr));
  if (!out.is_valid()) throw nb::python_error();
  return wrap_outputs(p, out);
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
      // Where this rank's block starts in the global tensor (zeros if the rank is outside the mesh).
      .def_prop_ro("local_offset", [](const DTensorSpec& s) {
        if (!s.mesh->contains_me()) return shape_tuple(Shape(s.shape.size(), 0));
        return shape_tuple(s.local_block(s.mesh->coordinate()).second);
      })
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
      .def_prop_ro("op", [](const BridgePlan& p) { return p.prep->call.op().name(); })
      .def_prop_ro("strategy", [](const BridgePlan& p) { return p.prep->decision->strategy.str(); })
      .def_prop_ro("has_step", [](const BridgePlan& p) { return p.prep->decision->strategy.step() != 0; })
      .def_prop_ro("outputs", [](const BridgePlan& p) { return p.prep->out_specs; })
      .def_prop_ro("input_placements", [](const BridgePlan& p) {
        nb::list l;
        for (const Placements& ps : p.prep->decision->strategy.inputs) {
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

  b.def("set_types", [](nb::handle bridge_tensor, nb::handle torch_tensor, nb::handle torch_dtype,
                        nb::handle resolve) {
    g_bridge_type = nb::borrow(bridge_tensor).release().ptr();
    g_torch_tensor = nb::borrow(torch_tensor).release().ptr();
    g_torch_dtype = nb::borrow(torch_dtype).release().ptr();
    g_resolve = nb::borrow(resolve).release().ptr();
    g_make_wrapper = nb::getattr(torch_tensor, "_make_wrapper_subclass").release().ptr();
    g_strided = nb::object(nb::module_::import_("torch").attr("strided")).release().ptr();
    g_names = {PyUnicode_InternFromString("_spec"), PyUnicode_InternFromString("_local"),
               PyUnicode_InternFromString("_mesh"), PyUnicode_InternFromString("shape"),
               PyUnicode_InternFromString("dtype"), PyUnicode_InternFromString("device")};
  }, "bridge_tensor"_a, "torch_tensor"_a, "torch_dtype"_a, "resolve"_a,
     "The bridge's tensor class, torch.Tensor, torch.dtype and the per-OpOverload resolver of the "
     "native __torch_dispatch__ (once, at import).");
  b.def("release_caches", [] {
    for (auto release : g_release) release();
  }, "Drops the native dispatch's cached Python objects (at interpreter exit; they refill on use).");
  b.def("torch_dispatch", &torch_dispatch, "cls"_a, "func"_a, "types"_a, "args"_a = nb::none(),
        "kwargs"_a = nb::none(),
        "dtensor.bridge.DTensor.__torch_dispatch__ (as a classmethod): the engine's common path "
        "natively, Python handlers for the rest.");
  b.def("prepare", &prepare_call, "name"_a, "args"_a, "kwargs"_a,
        "The engine's decision for the registered op `name` on an ATen call's args/kwargs (bridge "
        "tensors, plain torch tensors taken as replicated, values).");
}

}  // namespace dtensor::python
