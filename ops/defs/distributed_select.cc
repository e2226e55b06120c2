// The distributed selection of median / nanmedian / kthvalue over a sharded dim (or over the whole
// tensor): no data moves, only per-row counts. The k-th value is found by bisection over the
// dtype's order-preserving integer keys (a float's bits with the sign handled), one all-reduce of
// counts per round (32 rounds for float32, 16 for bfloat16, 64 for float64 at most), then its index
// as the right occurrence in global order: the single-device rule of kernels/cpu/selection.h
// (stable order by (value, index), NaN after every number).
#include <cmath>
#include <cstring>

#include "kernels/cpu/selection.h"
#include "ops/defs/steps.h"

namespace dtensor::ops {
namespace {

enum class Sel { kMedian, kNanMedian, kKth };

int key_bits(DType t) {
  switch (t) {
    case DType::kBFloat16:
    case DType::kFloat16: return 16;
    case DType::kFloat32:
    case DType::kInt32: return 32;
    default: return 64;
  }
}

// Order-preserving key of a value of dtype t (numbers only).
uint64_t to_key(double v, int64_t iv, DType t) {
  auto flip = [](uint64_t b, int bits) {
    uint64_t sign = uint64_t{1} << (bits - 1);
    uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    return (b & sign) ? (~b & mask) : (b | sign);
  };
  switch (t) {
    case DType::kFloat32: {
      float f = static_cast<float>(v);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      return flip(b, 32);
    }
    case DType::kFloat64: {
      uint64_t b;
      std::memcpy(&b, &v, 8);
      return flip(b, 64);
    }
    case DType::kBFloat16: return flip(BFloat16(static_cast<float>(v)).bits, 16);
    case DType::kFloat16: return flip(Float16(static_cast<float>(v)).bits, 16);
    case DType::kInt32: return static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(iv)) ^ 0x80000000u);
    default: return static_cast<uint64_t>(iv) ^ (uint64_t{1} << 63);
  }
}

// Inverse of to_key, as (double value, int64 value).
std::pair<double, int64_t> from_key(uint64_t k, DType t) {
  auto unflip = [](uint64_t key, int bits) {
    uint64_t sign = uint64_t{1} << (bits - 1);
    uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    return (key & sign) ? (key & ~sign) : (~key & mask);
  };
  switch (t) {
    case DType::kFloat32: {
      uint32_t b = static_cast<uint32_t>(unflip(k, 32));
      float f;
      std::memcpy(&f, &b, 4);
      return {f, 0};
    }
    case DType::kFloat64: {
      uint64_t b = unflip(k, 64);
      double d;
      std::memcpy(&d, &b, 8);
      return {d, 0};
    }
    case DType::kBFloat16: {
      BFloat16 h;
      h.bits = static_cast<uint16_t>(unflip(k, 16));
      return {static_cast<float>(h), 0};
    }
    case DType::kFloat16: {
      Float16 h;
      h.bits = static_cast<uint16_t>(unflip(k, 16));
      return {static_cast<float>(h), 0};
    }
    case DType::kInt32: {
      int32_t i = static_cast<int32_t>(static_cast<uint32_t>(k) ^ 0x80000000u);
      return {static_cast<double>(i), i};
    }
    default: {
      int64_t i = static_cast<int64_t>(k ^ (uint64_t{1} << 63));
      return {static_cast<double>(i), i};
    }
  }
}

// Per-row values of dtype t from doubles / int64s (NaN rows marked by `nan`).
Tensor values_tensor(const Shape& rows, DType t, const std::vector<uint64_t>& keys, const std::vector<bool>& nan) {
  if (!is_floating(t)) {
    Tensor out = Tensor::empty(rows, DType::kInt64);
    int64_t* p = out.data<int64_t>();
    for (size_t r = 0; r < keys.size(); ++r) p[r] = from_key(keys[r], t).second;
    return out.to(t);
  }
  Tensor out = Tensor::empty(rows, DType::kFloat64);
  double* p = out.data<double>();
  for (size_t r = 0; r < keys.size(); ++r) p[r] = nan[r] ? std::nan("") : from_key(keys[r], t).first;
  return out.to(t);
}

struct Reducer {
  const std::vector<int>& dims;
  const DeviceMesh& mesh;
  Timeout timeout;
  Tensor& operator()(Tensor& t, ReduceOp op) const {
    for (int md : dims) mesh.group(md).all_reduce(t, op, timeout);
    return t;
  }
};

StepDef select_step(Sel kind, bool whole) {
  StepDef step;
  step.name = "select";
  step.one_mesh_dim = !whole;
  step.traffic = [whole](const OpCall& c, const Strategy& st, const std::vector<int>& dims) {
    Shape block = local_block(c.tensor(0).shape, st.inputs[0], c.mesh_shape(),
                              std::vector<int64_t>(c.mesh_shape().size(), 0)).first;
    int64_t rows = 1;
    if (!whole) {
      int64_t d = wrap_dim(c.get_int("dim"), static_cast<int64_t>(block.size()), "dim");
      rows = block[d] == 0 ? 0 : numel(block) / block[d];
    }
    int64_t group = 1;
    for (int i : dims) group *= c.mesh_shape()[i];
    const int rounds = key_bits(c.tensor(0).dtype) + (whole ? 3 : 6);
    const int64_t per = comm_bytes_sent(CommKind::kAllReduce, rows * 8, group);
    return StepTraffic{CommKind::kAllReduce, per * rounds, rounds};
  };
  step.run = [kind, whole](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                           const std::vector<int>& dims, const DeviceMesh& mesh, Timeout timeout) {
    const DType dt = c.tensor(0).dtype;
    Reducer reduce{dims, mesh, timeout};
    Tensor x = in[0];
    int64_t d = 0, n = 0, offset = 0;
    if (whole) {
      x = x.contiguous().reshape({-1});
      n = numel(c.tensor(0).shape);
    } else {
      d = wrap_dim(c.get_int("dim"), static_cast<int64_t>(c.tensor(0).shape.size()), "dim");
      n = c.tensor(0).shape.empty() ? 1 : c.tensor(0).shape[d];
      offset = ctx.in_block(c, 0).second[d];
    }
    Tensor nans = kernels::count_nan(x, d, true);
    reduce(nans, ReduceOp::kSum);
    const Shape rows = nans.sizes();
    const int64_t R = nans.numel();
    auto M = nans.to_vector<int64_t>();
    std::vector<int64_t> k(R);
    std::vector<bool> is_nan(R);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t numbers = n - M[r];
      if (kind == Sel::kMedian) {
        is_nan[r] = M[r] > 0;
        k[r] = is_nan[r] ? numbers + 1 : (n - 1) / 2 + 1;
      } else if (kind == Sel::kNanMedian) {
        is_nan[r] = numbers == 0;
        k[r] = is_nan[r] ? 1 : (numbers - 1) / 2 + 1;
      } else {
        k[r] = c.get_int("k");
        is_nan[r] = k[r] > numbers;
      }
    }
    // Bisection over keys between the global min and max of the numbers.
    auto [mn, mx] = kernels::min_max(x, d, true);
    reduce(mn, ReduceOp::kMin);
    reduce(mx, ReduceOp::kMax);
    std::vector<uint64_t> lo(R), hi(R);
    {
      auto mnd = mn.to(DType::kFloat64).to_vector<double>(), mxd = mx.to(DType::kFloat64).to_vector<double>();
      auto mni = mn.to(DType::kInt64).to_vector<int64_t>(), mxi = mx.to(DType::kInt64).to_vector<int64_t>();
      for (int64_t r = 0; r < R; ++r) {
        lo[r] = is_nan[r] ? 0 : to_key(mnd[r], mni[r], dt);
        hi[r] = is_nan[r] ? 0 : to_key(mxd[r], mxi[r], dt);
      }
    }
    while (true) {
      bool open = false;
      std::vector<uint64_t> mid(R);
      for (int64_t r = 0; r < R; ++r) {
        mid[r] = lo[r] + (hi[r] - lo[r]) / 2;
        open |= lo[r] < hi[r];
      }
      if (!open) break;  // identical on every rank: lo/hi come from all-reduced counts
      Tensor le = kernels::count_less_equal(x, d, values_tensor(rows, dt, mid, std::vector<bool>(R, false)));
      reduce(le, ReduceOp::kSum);
      auto cnt = le.to_vector<int64_t>();
      for (int64_t r = 0; r < R; ++r) {
        if (lo[r] >= hi[r]) continue;
        if (cnt[r] >= k[r]) hi[r] = mid[r];
        else lo[r] = mid[r] + 1;
      }
    }
    Tensor values = values_tensor(rows, dt, lo, is_nan);
    if (whole) return std::vector<Tensor>{values.reshape(ctx.out_block(0).first)};
    // The index: the (k - #less)-th occurrence of the value in global order.
    Tensor less = kernels::count_less(x, d, values);
    Tensor local_eq = kernels::sub(kernels::count_less_equal(x, d, values), less);
    reduce(less, ReduceOp::kSum);
    ProcessGroup& g = mesh.group(dims[0]);
    Tensor all_eq = Tensor::empty({g.size() * R}, DType::kInt64);
    g.all_gather(local_eq.contiguous().reshape({R}), all_eq, std::vector<int64_t>(g.size(), R), timeout);
    auto ls = less.to_vector<int64_t>(), ae = all_eq.to_vector<int64_t>();
    Tensor occ = Tensor::empty(rows, DType::kInt64);
    int64_t* po = occ.data<int64_t>();
    for (int64_t r = 0; r < R; ++r) {
      int64_t before = 0;
      for (int q = 0; q < g.rank(); ++q) before += ae[q * R + r];
      po[r] = k[r] - ls[r] - before;
    }
    Tensor idx = kernels::index_of_occurrence(x, d, values, occ, offset);
    g.all_reduce(idx, ReduceOp::kMax, timeout);
    const bool keep = c.get_bool("keepdim");
    if (!keep) {
      values = values.squeeze(d).contiguous();
      idx = idx.squeeze(d).contiguous();
    }
    return std::vector<Tensor>{values, idx};
  };
  return step;
}

}  // namespace

void add_select_steps(Registry& reg) {
  reg.mutable_find("median").steps.push_back(select_step(Sel::kMedian, true));
  reg.mutable_find("nanmedian").steps.push_back(select_step(Sel::kNanMedian, true));
  reg.mutable_find("median.dim").steps.push_back(select_step(Sel::kMedian, false));
  reg.mutable_find("nanmedian.dim").steps.push_back(select_step(Sel::kNanMedian, false));
  reg.mutable_find("kthvalue").steps.push_back(select_step(Sel::kKth, false));
}

}  // namespace dtensor::ops
