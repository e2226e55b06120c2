// The distributed selection of median / nanmedian / kthvalue over a sharded dim (or over the whole
// tensor): no data moves, only per-row histograms. The k-th value is found by a radix select over
// the dtype's order-preserving keys (kernels/cpu/radix_select.h), kDigitBits bits a round, most
// significant first: each rank counts the digit of its elements whose key matches the prefix chosen
// so far, one all-reduce (sum) of the histograms of all rows, and every rank picks the bucket that
// holds the k-th element. The first round's histograms also count NaNs, which fixes k (median: NaN
// if any; nanmedian: among the numbers). Rounds: 1 (bool), 2 (16-bit), 4 (32-bit), 8 (64-bit keys).
// Along a dim, the index is then the right occurrence of the value in global order: the
// single-device rule of kernels/cpu/selection.h (stable order by (value, index), NaN after every
// number), with one all-gather of the ranks' counts of the value and one all-reduce of the index.
#include <cmath>
#include <limits>

#include "kernels/cpu/radix_select.h"
#include "kernels/cpu/selection.h"
#include "ops/common/steps.h"
#include "ops/family.h"

namespace dtensor::ops {
namespace {

enum class Sel { kMedian, kNanMedian, kKth };

// 8-bit digits: 4 rounds for 32-bit keys with histograms of 257 counts a row (int32 on the wire); 11 bits would save a
// round only for 32-bit keys at 8x the bytes, which loses once the op has many rows.
constexpr int kDigitBits = 8;

// Bytes of one count on the wire: int32 while no count can pass 2^31 - 1 (the selected dim's size).
int64_t count_bytes(int64_t n) { return n <= std::numeric_limits<int32_t>::max() ? 4 : 8; }

int radix_rounds(DType t) { return (kernels::radix_key_bits(t) + kDigitBits - 1) / kDigitBits; }

// Per-row values of dtype t from keys (NaN rows marked by `nan`).
Tensor values_tensor(const Shape& rows, DType t, const std::vector<uint64_t>& keys, const std::vector<bool>& nan) {
  if (!is_floating(t)) {
    Tensor out = Tensor::empty(rows, DType::kInt64);
    int64_t* p = out.data<int64_t>();
    for (size_t r = 0; r < keys.size(); ++r) p[r] = kernels::radix_decode(keys[r], t).i;
    return out.to(t);
  }
  Tensor out = Tensor::empty(rows, DType::kFloat64);
  double* p = out.data<double>();
  for (size_t r = 0; r < keys.size(); ++r) p[r] = nan[r] ? std::nan("") : kernels::radix_decode(keys[r], t).f;
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
  // Kernels (radix_histogram, index_of_occurrence, embedding) and collectives on the input's device;
  // what crosses to the host is per-row numbers: each round's histograms, the counts and the index.
  step.runs_on_device = true;
  step.traffic = [whole](const OpCall& c, const Strategy& st, const std::vector<int>& dims) {
    Shape block = local_block(c.tensor(0).shape, st.inputs[0], c.mesh_shape(),
                              std::vector<int64_t>(c.mesh_shape().size(), 0)).first;
    const Shape& global = c.tensor(0).shape;
    int64_t rows = 1, n = numel(global);  // n: the elements a row selects among
    if (!whole && !global.empty()) {
      const int64_t d = wrap_dim(c.get_int("dim"), static_cast<int64_t>(block.size()), "dim");
      n = global[d];
      for (size_t i = 0; i < block.size(); ++i)
        if (static_cast<int64_t>(i) != d) rows *= block[i];
    }
    int64_t group = 1;
    for (int i : dims) group *= c.mesh_shape()[i];
    // Per round one all-reduce of the rows' histograms (2^kDigitBits + 1 counts a row); along a dim
    // also the all-gather of the counts of the value and the all-reduce of the index.
    const int radix = radix_rounds(c.tensor(0).dtype);
    const int64_t hist = rows * ((int64_t{1} << kDigitBits) + 1) * count_bytes(n);
    int64_t bytes = radix * comm_bytes_sent(CommKind::kAllReduce, hist, group);
    int rounds = radix;
    if (!whole) {
      bytes += comm_bytes_sent(CommKind::kAllGather, rows * 8 * group, group) +
               comm_bytes_sent(CommKind::kAllReduce, rows * 16, group);
      rounds += 2;
    }
    return StepTraffic{CommKind::kAllReduce, bytes, rounds};
  };
  step.run = [kind, whole](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx,
                           const std::vector<int>& dims, const DeviceMesh& mesh, Timeout timeout) {
    const DType dt = c.tensor(0).dtype;
    Reducer reduce{dims, mesh, timeout};
    Tensor x = in[0];
    const Device dev = x.device();  // the data stays there; per-row numbers cross to the host
    int64_t d = 0, n = 0, offset = 0;
    if (whole) {
      x = x.contiguous().reshape({-1});
      n = numel(c.tensor(0).shape);
    } else {
      d = wrap_dim(c.get_int("dim"), static_cast<int64_t>(c.tensor(0).shape.size()), "dim");
      n = c.tensor(0).shape.empty() ? 1 : c.tensor(0).shape[d];
      offset = ctx.in_block(c, 0).second[d];
    }
    // The per-row shape (x with dim of size 1) and row count.
    Shape rows = x.sizes();
    if (!rows.empty()) rows[d] = 1;
    const int64_t R = numel(rows);
    const int width = kernels::radix_key_bits(dt);
    const int64_t cols = (int64_t{1} << kDigitBits) + 1;
    std::vector<uint64_t> prefix(R, 0);
    std::vector<int64_t> k(R), less(R, 0), nans(R, 0), local_eq(R, 0);
    std::vector<bool> is_nan(R, false);
    // Key widths are multiples of kDigitBits: the last round's digit is the key's lowest.
    for (int round = 0, shift = width - kDigitBits; shift >= 0; ++round, shift -= kDigitBits) {
      const int bits = kDigitBits;
      Tensor h = kernels::radix_histogram(x, d, prefix, shift, bits);
      const std::vector<int64_t> local = h.to(cpu()).to_vector<int64_t>();  // the round's one host read
      Tensor wire = count_bytes(n) == 4 ? h.to(DType::kInt32) : h;
      reduce(wire, ReduceOp::kSum);
      const std::vector<int64_t> global = wire.to(cpu()).to(DType::kInt64).to_vector<int64_t>();
      for (int64_t r = 0; r < R; ++r) {
        const int64_t* g = global.data() + r * cols;
        const int64_t* l = local.data() + r * cols;
        const int64_t buckets = (int64_t{1} << bits);
        if (round == 0) {
          // k (1-based) in the order "numbers ascending, NaN after every number".
          nans[r] = g[cols - 1];
          const int64_t numbers = n - nans[r];
          if (kind == Sel::kMedian) k[r] = nans[r] > 0 ? numbers + 1 : (n - 1) / 2 + 1;
          else if (kind == Sel::kNanMedian) k[r] = numbers == 0 ? 1 : (numbers - 1) / 2 + 1;
          else k[r] = c.get_int("k");
          is_nan[r] = k[r] > numbers;  // also an empty whole tensor's median
          if (is_nan[r]) {
            less[r] = numbers;
            local_eq[r] = l[cols - 1];
          }
        }
        if (is_nan[r]) continue;
        // The bucket holding the k-th element: every rank sees the same global counts.
        int64_t below = less[r], j = 0;
        while (j < buckets - 1 && below + g[j] < k[r]) below += g[j++];
        less[r] = below;
        prefix[r] = (prefix[r] << bits) | static_cast<uint64_t>(j);
        local_eq[r] = l[j];
      }
    }
    Tensor values = values_tensor(rows, dt, prefix, is_nan);  // host
    if (whole) return std::vector<Tensor>{values.reshape(ctx.out_block(0).first).to(dev)};
    // The index: the (k - #less)-th occurrence of the value in global order; the ranks before this
    // one hold `before` of them. The rank that holds it also says whether it is -0.0 (the key
    // merges the zeros; the value returned is the element at the index, as on one device).
    ProcessGroup& g = mesh.group(dims[0]);
    Tensor all_eq = Tensor::empty({g.size() * R}, DType::kInt64, dev);
    g.all_gather(Tensor::from_vector(local_eq, {R}).to(dev), all_eq, std::vector<int64_t>(g.size(), R), timeout);
    auto ae = all_eq.to(cpu()).to_vector<int64_t>();
    Tensor occ = Tensor::empty(rows, DType::kInt64);
    int64_t* po = occ.data<int64_t>();
    for (int64_t r = 0; r < R; ++r) {
      int64_t before = 0;
      for (int q = 0; q < g.rank(); ++q) before += ae[q * R + r];
      po[r] = k[r] - less[r] - before;
    }
    Tensor idx = kernels::index_of_occurrence(x, d, values.to(dev), occ.to(dev), offset);
    std::vector<int64_t> found = idx.to(cpu()).to_vector<int64_t>();
    found.resize(2 * R, 0);
    std::vector<double> vals = values.to(DType::kFloat64).to_vector<double>();
    bool zero = false;
    for (int64_t r = 0; r < R; ++r) zero |= !is_nan[r] && vals[r] == 0 && is_floating(dt);
    if (zero) {  // only then is the sign of the held element needed: the rows' found elements, gathered
      const int64_t nl = x.dim() == 0 ? 1 : x.size(d);
      std::vector<int64_t> held_rows, at;  // the rows whose element this rank holds
      for (int64_t r = 0; r < R; ++r)
        if (found[r] >= 0) {
          held_rows.push_back(r);
          at.push_back(r * nl + found[r] - offset);
        }
      if (!at.empty()) {
        const Tensor xr = x.movedim(d, -1).contiguous().reshape({R * nl, 1}).to(DType::kFloat64);
        const int64_t m = static_cast<int64_t>(at.size());
        const std::vector<double> held =
            kernels::embedding(xr, Tensor::from_vector(at, {m}).to(dev)).to(cpu()).to_vector<double>();
        for (int64_t q = 0; q < m; ++q) found[R + held_rows[q]] = std::signbit(held[q]) ? 1 : 0;
      }
    }
    Tensor both = Tensor::from_vector(found, {2 * R}).to(dev);
    g.all_reduce(both, ReduceOp::kMax, timeout);
    const std::vector<int64_t> b = both.to(cpu()).to_vector<int64_t>();
    idx = Tensor::from_vector(std::vector<int64_t>(b.begin(), b.begin() + R), rows);
    if (zero) {
      for (int64_t r = 0; r < R; ++r)
        if (!is_nan[r] && vals[r] == 0 && b[R + r]) vals[r] = -0.0;
      values = Tensor::from_vector(vals, rows).to(dt);
    }
    const bool keep = c.get_bool("keepdim");
    if (!keep) {
      values = values.squeeze(d).contiguous();
      idx = idx.squeeze(d).contiguous();
    }
    return std::vector<Tensor>{values.to(dev), idx.to(dev)};
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

DTENSOR_FAMILY_PART("selection", kSteps, add_select_steps);

}  // namespace dtensor::ops
