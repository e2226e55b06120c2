#include "kernels/cuda/attention_cudnn.h"

#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

#ifdef DTENSOR_HAS_CUDNN_FRONTEND
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <map>
#include <memory>
#endif

namespace dtensor::kernels::cuda::detail {

std::string cudnn_sdpa_unsupported(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!cudnn_sdpa_built()) {
    return "this build has no cuDNN C++ frontend (run scripts/install_deps.sh, then rebuild)";
  }
  if (q.dtype() != DType::kBFloat16 && q.dtype() != DType::kFloat16)
    return absl::StrCat("cuDNN's fused attention takes bfloat16 or float16, got ",
                        dtype_name(q.dtype()));
  const int64_t d = q.size(-1);
  if (v.size(-1) != d || k.size(-1) != d)
    return absl::StrCat("the head dims differ (q ", d, ", k ", k.size(-1), ", v ", v.size(-1), ")");
  if (d % 8 != 0 || d > 256)
    return absl::StrCat("head dim ", d,
                        " (accepted: a multiple of 8, at most 128, or 256 on sm_90)");
  for (const Tensor* t : {&q, &k, &v})
    if (t->stride(-1) != 1) return absl::StrCat("the last dim of ", t->str(), " is not contiguous");
  return "";
}

#ifndef DTENSOR_HAS_CUDNN_FRONTEND

bool cudnn_sdpa_built() { return false; }

void cudnn_sdpa_forward(const Tensor&, const Tensor&, const Tensor&, bool, float, Tensor&,
                        Tensor&) {
  DT_FAIL("scaled_dot_product_attention (cuDNN): ",
          "this build has no cuDNN C++ frontend (run scripts/install_deps.sh, then rebuild)");
}

void cudnn_sdpa_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, bool, float, Tensor&, Tensor&, Tensor&) {
  DT_FAIL("scaled_dot_product_attention_backward (cuDNN): ",
          "this build has no cuDNN C++ frontend (run scripts/install_deps.sh, then rebuild)");
}

#else

namespace {

namespace fe = cudnn_frontend;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

#define DT_CUDNN_CHECK(expr, what)                                          \
  do {                                                                      \
    cudnnStatus_t dt_st_ = (expr);                                          \
    if (dt_st_ != CUDNN_STATUS_SUCCESS)                                     \
      DT_FAIL(what, ": ", #expr, " failed: ", cudnnGetErrorString(dt_st_)); \
  } while (0)

#define DT_FE_CHECK(expr, what)                                                         \
  do {                                                                                  \
    auto dt_fe_ = (expr);                                                               \
    if (dt_fe_.is_bad()) DT_FAIL(what, ": cuDNN: ", #expr, ": ", dt_fe_.get_message()); \
  } while (0)

cudnnHandle_t handle_for(int device) {
  thread_local std::map<int, cudnnHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cudnnHandle_t h;
  DT_CUDNN_CHECK(cudnnCreate(&h), "cuDNN handle");
  handles[device] = h;
  return h;
}

std::vector<int64_t> dims(const Tensor& t) { return {t.sizes().begin(), t.sizes().end()}; }
std::vector<int64_t> strides(const Tensor& t) { return {t.strides().begin(), t.strides().end()}; }

std::string key_of(const char* kind, const std::vector<const Tensor*>& ts, bool causal,
                   float scale) {
  std::string key =
      absl::StrCat(kind, " ", ts[0]->device().str(), causal ? " causal " : " full ", scale);
  for (const Tensor* t : ts)
    absl::StrAppend(&key, " ", dtype_name(t->dtype()), shape_str(t->sizes()),
                    shape_str(t->strides()));
  return key;
}

fe::DataType_t fe_type(DType t) {
  return t == DType::kBFloat16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

std::shared_ptr<fe::graph::Graph> new_graph(DType dtype) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name,
                                                    int64_t uid, const Tensor& t) {
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims(t)).set_stride(
          strides(t)));
}

void finish(fe::graph::Graph& g, cudnnHandle_t h, const char* what) {
  DT_FE_CHECK(g.build(h, {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), what);
}

// Per thread: the handle (and thus the plans) belong to this thread's use of the device.
using Cache = std::map<std::string, std::shared_ptr<fe::graph::Graph> >;
Cache& cache() {
  thread_local Cache c;
  return c;
}

void execute(fe::graph::Graph& g, cudnnHandle_t h, std::unordered_map<int64_t, void*>& ptrs,
             Device device, const char* what) {
  int64_t bytes = 0;
  DT_FE_CHECK(g.get_workspace_size(bytes), what);
  Tensor ws = workspace(static_cast<size_t>(std::max<int64_t>(bytes, 1)), device);
  DT_FE_CHECK(g.execute(h, ptrs, ws.data_ptr()), what);
}

}  // namespace

bool cudnn_sdpa_built() { return true; }

void cudnn_sdpa_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale,
                        Tensor& out, Tensor& lse) {
  const char* what = "scaled_dot_product_attention (cuDNN)";
  const int dev = q.device().index;
  ::dtensor::cuda::DeviceGuard guard(dev);
  cudnnHandle_t h = handle_for(dev);
  DT_CUDNN_CHECK(cudnnSetStream(h, stream_of(q)), what);
  const int64_t b = q.size(0), nh = q.size(1), sq = q.size(2), d = q.size(3);
  out = Tensor::empty({b, nh, sq, d}, q.dtype(), q.device());
  lse = Tensor::empty({b, nh, sq}, DType::kFloat32, q.device());
  const std::string key = key_of("fwd", {&q, &k, &v}, causal, scale);
  auto& c = cache();
  auto it = c.find(key);
  if (it == c.end()) {
    auto g = new_graph(q.dtype());
    auto Q = input(*g, "Q", kQ, q), K = input(*g, "K", kK, k), V = input(*g, "V", kV, v);
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("flash_attention")
                    .set_generate_stats(true)
                    .set_causal_mask(causal)
                    .set_attn_scale(scale);
    auto [O, Stats] = g->sdpa(Q, K, V, opts);
    O->set_output(true).set_uid(kO).set_dim(dims(out)).set_stride(strides(out));
    Stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({b, nh, sq, 1})
        .set_stride({nh * sq, sq, 1, 1});
    finish(*g, h, what);
    it = c.emplace(key, g).first;
  }
  std::unordered_map<int64_t, void*> ptrs{{kQ, q.data_ptr()},
                                          {kK, k.data_ptr()},
                                          {kV, v.data_ptr()},
                                          {kO, out.data_ptr()},
                                          {kStats, lse.data_ptr()}};
  execute(*it->second, h, ptrs, q.device(), what);
}

void cudnn_sdpa_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& dout, const Tensor& lse, bool causal, float scale,
                         Tensor& dq, Tensor& dk, Tensor& dv) {
  const char* what = "scaled_dot_product_attention_backward (cuDNN)";
  const int dev = q.device().index;
  ::dtensor::cuda::DeviceGuard guard(dev);
  cudnnHandle_t h = handle_for(dev);
  DT_CUDNN_CHECK(cudnnSetStream(h, stream_of(q)), what);
  const int64_t b = q.size(0), nh = q.size(1), sq = q.size(2);
  dq = Tensor::empty(q.sizes(), q.dtype(), q.device());
  dk = Tensor::empty(k.sizes(), k.dtype(), k.device());
  dv = Tensor::empty(v.sizes(), v.dtype(), v.device());
  const Tensor stats = contiguous(lse).view({b, nh, sq, 1});
  const std::string key = key_of("bwd", {&q, &k, &v, &out, &dout}, causal, scale);
  auto& c = cache();
  auto it = c.find(key);
  if (it == c.end()) {
    auto g = new_graph(q.dtype());
    auto Q = input(*g, "Q", kQ, q), K = input(*g, "K", kK, k), V = input(*g, "V", kV, v);
    auto O = input(*g, "O", kO, out), dO = input(*g, "dO", kDO, dout);
    auto Stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("Stats")
                               .set_uid(kStats)
                               .set_dim({b, nh, sq, 1})
                               .set_stride({nh * sq, sq, 1, 1})
                               .set_data_type(fe::DataType_t::FLOAT));
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("flash_attention_backward")
                    .set_causal_mask(causal)
                    .set_attn_scale(scale);
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, opts);
    dQ->set_output(true).set_uid(kDQ).set_dim(dims(dq)).set_stride(strides(dq));
    dK->set_output(true).set_uid(kDK).set_dim(dims(dk)).set_stride(strides(dk));
    dV->set_output(true).set_uid(kDV).set_dim(dims(dv)).set_stride(strides(dv));
    finish(*g, h, what);
    it = c.emplace(key, g).first;
  }
  std::unordered_map<int64_t, void*> ptrs{
      {kQ, q.data_ptr()},   {kK, k.data_ptr()},     {kV, v.data_ptr()},
      {kO, out.data_ptr()}, {kDO, dout.data_ptr()}, {kStats, stats.data_ptr()},
      {kDQ, dq.data_ptr()}, {kDK, dk.data_ptr()},   {kDV, dv.data_ptr()}};
  execute(*it->second, h, ptrs, q.device(), what);
}

#endif  // DTENSOR_HAS_CUDNN_FRONTEND

}  // namespace dtensor::kernels::cuda::detail
