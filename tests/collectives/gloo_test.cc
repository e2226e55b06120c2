// Gloo backend, env initialisation and the launcher, with real processes.
//
// One binary, two roles. Without DTENSOR_GLOO_TEST_SCENARIO in the environment it is the GoogleTest
// driver: each TEST starts 4 ranks of this same binary through the launcher library, naming a
// scenario, and checks how every rank exited. With it, it is a worker: it initialises the backend
// from the environment the launcher set (RANK, WORLD_SIZE, DTENSOR_STORE), runs the scenario,
// checks the results against values computed by hand, and exits 0 (pass) or 1 (fail, with the
// reason on stderr).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <complex>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dtensor/collectives/env.h"
#include "dtensor/collectives/gloo_backend.h"
#include "gtest/gtest.h"
#include "tests/testing/rank_worker.h"
#include "tools/launcher.h"

namespace dtensor {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kScenarioVar[] = "DTENSOR_GLOO_TEST_SCENARIO";
constexpr int kWorld = 4;
// Generous for the working scenarios (a loaded 2-core machine), short for the failure ones.
constexpr Timeout kOkTimeout = milliseconds(30000);
constexpr Timeout kFailTimeout = milliseconds(2000);

// ------------------------------------------------------------------------------------------------
// Worker side.

std::string vec_str(const std::vector<double>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

void check_values(const Tensor& t, const std::vector<double>& expected, const std::string& what) {
  std::vector<double> got = t.to_vector<double>();
  WCHECK(got == expected, what, ": got ", vec_str(got), ", expected ", vec_str(expected));
}

std::vector<int> world_ranks() {
  std::vector<int> r(kWorld);
  for (int i = 0; i < kWorld; ++i) r[i] = i;
  return r;
}

Tensor make(const std::vector<double>& values, DType dtype) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())}).to(dtype);
}

// all_reduce of every op on several dtypes, rank-dependent values with both signs.
void scenario_all_reduce(Backend& b) {
  auto world = b.new_group(world_ranks(), "world", kOkTimeout);
  const int me = b.rank();
  constexpr int kN = 7;
  auto value = [](int r, int i) { return (r + 1) * (i + 1) * (i % 2 == 0 ? 1.0 : -1.0); };
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      std::vector<double> mine, expected;
      for (int i = 0; i < kN; ++i) {
        mine.push_back(value(me, i));
        double s = 0, mx = -1e9, mn = 1e9;
        for (int r = 0; r < kWorld; ++r) {
          s += value(r, i);
          mx = std::max(mx, value(r, i));
          mn = std::min(mn, value(r, i));
        }
        double avg = dt == DType::kInt64 ? std::trunc(s / kWorld) : s / kWorld;
        expected.push_back(op == ReduceOp::kSum   ? s
                           : op == ReduceOp::kAvg ? avg
                           : op == ReduceOp::kMax ? mx
                                                  : mn);
      }
      Tensor t = make(mine, dt);
      world->all_reduce(t, op, kOkTimeout);
      check_values(t, expected,
                   absl::StrCat("all_reduce ", reduce_op_name(op), " ", dtype_name(dt)));
    }
  }
  // Ring byte count: 2 (n-1)/n of the buffer.
  const int64_t before = world->stats().bytes_sent;
  Tensor f = Tensor::full({16}, 1.0, DType::kFloat32);
  world->all_reduce(f, ReduceOp::kSum, kOkTimeout);
  WCHECK(world->stats().bytes_sent - before == 2 * 3 * 64 / 4, world->stats().bytes_sent - before);
  // float16 and bool go through the same reduce functions.
  Tensor h = make({0.5 * me, 1.0}, DType::kFloat16);
  world->all_reduce(h, ReduceOp::kSum, kOkTimeout);
  check_values(h, {3.0, 4.0}, "all_reduce sum float16");
  Tensor bo = make({me == 2 ? 1.0 : 0.0, 1.0}, DType::kBool);
  world->all_reduce(bo, ReduceOp::kMax, kOkTimeout);
  check_values(bo, {1.0, 1.0}, "all_reduce max bool");
  // A buffer of several Gloo segments (> 1 MiB).
  const int64_t big = (1 << 19) + 3;
  Tensor large = Tensor::full({big}, me + 1.0, DType::kFloat32);
  world->all_reduce(large, ReduceOp::kSum, kOkTimeout);
  std::vector<float> lv = large.to_vector<float>();
  for (int64_t i = 0; i < big; ++i)
    WCHECK(lv[i] == 10.0f, "large all_reduce element ", i, " = ", lv[i]);
  // Empty tensors are fine.
  Tensor empty = Tensor::empty({0});
  world->all_reduce(empty, ReduceOp::kSum, kOkTimeout);
}

void scenario_all_gather(Backend& b) {
  auto world = b.new_group(world_ranks(), "world", kOkTimeout);
  const int me = b.rank();
  const std::vector<int64_t> counts = {3, 0, 5, 2};
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
    std::vector<double> mine, expected;
    for (int r = 0; r < kWorld; ++r) {
      for (int64_t i = 0; i < counts[r]; ++i) {
        expected.push_back(r * 10 + i);
        if (r == me) mine.push_back(r * 10 + i);
      }
    }
    Tensor in = mine.empty() ? Tensor::empty({0}, dt) : make(mine, dt);
    Tensor out = Tensor::full({10}, -1.0, dt);
    const int64_t before = world->stats().bytes_sent;
    world->all_gather(in, out, counts, kOkTimeout);
    check_values(out, expected, absl::StrCat("all_gather ", dtype_name(dt)));
    WCHECK(world->stats().bytes_sent - before == static_cast<int64_t>(3 * out.nbytes() / 4),
           world->stats().bytes_sent - before);
  }
}

void scenario_reduce_scatter(Backend& b) {
  auto world = b.new_group(world_ranks(), "world", kOkTimeout);
  const int me = b.rank();
  const std::vector<int64_t> counts = {2, 3, 0, 4};
  int64_t offset = 0;
  for (int r = 0; r < me; ++r) offset += counts[r];
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    std::vector<double> in_v;
    for (int j = 0; j < 9; ++j) in_v.push_back((me + 1) * (j + 1));
    Tensor in = make(in_v, DType::kFloat64);
    Tensor out = Tensor::full({counts[me]}, -1.0, DType::kFloat64);
    world->reduce_scatter(in, out, counts, op, kOkTimeout);
    std::vector<double> expected;
    for (int64_t i = 0; i < counts[me]; ++i) {
      double j1 = offset + i + 1;
      expected.push_back(op == ReduceOp::kSum ? 10 * j1 : op == ReduceOp::kAvg ? 2.5 * j1 : 4 * j1);
    }
    check_values(out, expected, absl::StrCat("reduce_scatter ", reduce_op_name(op)));
  }
  // Every op on narrow and integer dtypes (integer avg truncates), same counts.
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      auto value = [](int r, int j) { return (r + 1) * (j + 1) * (j % 2 == 0 ? 1.0 : -1.0); };
      std::vector<double> in_v, expected;
      for (int j = 0; j < 9; ++j) in_v.push_back(value(me, j));
      for (int64_t i = 0; i < counts[me]; ++i) {
        const int j = static_cast<int>(offset + i);
        double s = 0, mx = -1e9, mn = 1e9;
        for (int r = 0; r < kWorld; ++r) {
          s += value(r, j);
          mx = std::max(mx, value(r, j));
          mn = std::min(mn, value(r, j));
        }
        const double avg = dt == DType::kInt64 ? std::trunc(s / kWorld) : s / kWorld;
        expected.push_back(op == ReduceOp::kSum   ? s
                           : op == ReduceOp::kAvg ? avg
                           : op == ReduceOp::kMax ? mx
                                                  : mn);
      }
      Tensor out = Tensor::full({counts[me]}, -1.0, dt);
      world->reduce_scatter(make(in_v, dt), out, counts, op, kOkTimeout);
      check_values(out, expected,
                   absl::StrCat("reduce_scatter ", reduce_op_name(op), " ", dtype_name(dt)));
    }
  }
  // float32 sums in rank order, ((b0 + b1) + b2) + b3, as the threads backend: with 1e8, 1, -1e8, 1
  // that is exactly 1 (1e8 + 1 rounds to 1e8); other orders give 0 or 2.
  {
    const double mine[] = {1e8, 1.0, -1e8, 1.0};
    Tensor in = Tensor::full({8}, mine[me], DType::kFloat32);
    Tensor out = Tensor::full({2}, -1.0, DType::kFloat32);
    world->reduce_scatter(in, out, {2, 2, 2, 2}, ReduceOp::kSum, kOkTimeout);
    check_values(out, {1.0, 1.0}, "reduce_scatter float32 rank order");
  }
  // Large uneven blocks (several MiB, one empty) and everything to one rank, back to back.
  {
    const std::vector<int64_t> big = {(1 << 20) + 5, 0, 3, (1 << 19) + 1};
    int64_t total = 0, at = 0;
    for (int r = 0; r < kWorld; ++r) total += big[r];
    for (int r = 0; r < me; ++r) at += big[r];
    std::vector<float> in_v(total);
    for (int64_t j = 0; j < total; ++j) in_v[j] = static_cast<float>(j * (me + 1));
    Tensor out = Tensor::full({big[me]}, -1.0, DType::kFloat32);
    world->reduce_scatter(Tensor::from_vector(in_v, {total}), out, big, ReduceOp::kSum, kOkTimeout);
    std::vector<float> got = out.to_vector<float>();
    for (int64_t i = 0; i < big[me]; ++i)
      WCHECK(got[i] == 10.0f * static_cast<float>(at + i), "large reduce_scatter element ", i, " = ", got[i]);
    const std::vector<int64_t> one = {0, 0, 6, 0};
    Tensor in1 = Tensor::full({6}, me + 1.0, DType::kFloat64);
    Tensor out1 = Tensor::full({one[me]}, -1.0, DType::kFloat64);
    world->reduce_scatter(in1, out1, one, ReduceOp::kMax, kOkTimeout);
    check_values(out1, std::vector<double>(one[me], 4.0), "reduce_scatter to one rank");
  }
  // A non-contiguous input (a transposed view) is staged by the front.
  {
    std::vector<double> base_v(8);
    for (int j = 0; j < 8; ++j) base_v[j] = j * (me + 1.0);
    Tensor in = Tensor::from_vector(base_v, {2, 4}).transpose(0, 1);  // [4, 2]: 0 4 1 5 2 6 3 7, scaled
    Tensor out = Tensor::full({2}, -1.0, DType::kFloat64);
    world->reduce_scatter(in, out, {2, 2, 2, 2}, ReduceOp::kSum, kOkTimeout);
    const double first[] = {0, 1, 2, 3};
    check_values(out, {10 * first[me], 10 * (first[me] + 4)}, "reduce_scatter of a transposed view");
  }
}

void scenario_all_to_all(Backend& b) {
  auto world = b.new_group(world_ranks(), "world", kOkTimeout);
  const int me = b.rank();
  auto count = [](int src, int dst) { return static_cast<int64_t>((src + dst) % 3); };
  std::vector<int64_t> send_counts, recv_counts;
  std::vector<double> in_v, expected;
  for (int d = 0; d < kWorld; ++d) {
    send_counts.push_back(count(me, d));
    for (int64_t k = 0; k < count(me, d); ++k) in_v.push_back(me * 1000 + d * 100 + k);
  }
  int64_t sent_to_others = 0;
  for (int d = 0; d < kWorld; ++d) {
    if (d != me) sent_to_others += count(me, d);
  }
  for (int s = 0; s < kWorld; ++s) {
    recv_counts.push_back(count(s, me));
    for (int64_t k = 0; k < count(s, me); ++k) expected.push_back(s * 1000 + me * 100 + k);
  }
  Tensor in = make(in_v, DType::kInt64);
  Tensor out = Tensor::full({static_cast<int64_t>(expected.size())}, -1.0, DType::kInt64);
  world->all_to_all(in, send_counts, out, recv_counts, kOkTimeout);
  check_values(out, expected, "all_to_all");
  WCHECK(world->stats().bytes_sent == sent_to_others * 8, world->stats().bytes_sent);
  // Rank 1 neither sends nor receives anything.
  auto count2 = [](int src, int dst) { return static_cast<int64_t>(src == 1 || dst == 1 ? 0 : 1); };
  std::vector<int64_t> s2, r2;
  std::vector<double> in2, expected2;
  for (int d = 0; d < kWorld; ++d) {
    s2.push_back(count2(me, d));
    if (count2(me, d)) in2.push_back(me * 10 + d);
    r2.push_back(count2(d, me));
    if (count2(d, me)) expected2.push_back(d * 10 + me);
  }
  Tensor i2 = in2.empty() ? Tensor::empty({0}, DType::kFloat32) : make(in2, DType::kFloat32);
  Tensor o2 = Tensor::full({static_cast<int64_t>(expected2.size())}, -1.0);
  world->all_to_all(i2, s2, o2, r2, kOkTimeout);
  check_values(o2, expected2, "all_to_all with an idle rank");
}

void scenario_broadcast(Backend& b) {
  auto world = b.new_group(world_ranks(), "world", kOkTimeout);
  const int me = b.rank();
  Tensor t = me == 2 ? make({1, 8, 15, 22, 29}, DType::kFloat32) : Tensor::full({5}, -1.0);
  world->broadcast(t, 2, kOkTimeout);
  check_values(t, {1, 8, 15, 22, 29}, "broadcast from 2");
  WCHECK(world->stats().bytes_sent == (me == 2 ? 20 : 0), world->stats().bytes_sent);
  Tensor u = make({me == 0 ? 7.0 : 0.0, me == 0 ? -3.0 : 0.0}, DType::kInt64);
  world->broadcast(u, 0, kOkTimeout);
  check_values(u, {7, -3}, "broadcast int64 from 0");
}

// A complex tensor [re0, im0, re1, im1, ...] from its interleaved parts, and back.
Tensor make_complex(const std::vector<double>& parts, DType dtype) {
  Tensor c = Tensor::empty({static_cast<int64_t>(parts.size() / 2)}, DType::kComplex128);
  auto* p = c.data<std::complex<double>>();
  for (size_t i = 0; i + 1 < parts.size(); i += 2) p[i / 2] = {parts[i], parts[i + 1]};
  return c.to(dtype);
}

std::vector<double> complex_parts(const Tensor& t) {
  Tensor c = t.to(DType::kComplex128).contiguous();
  std::vector<double> out;
  for (const auto& z : std::vector<std::complex<double>>(c.data<std::complex<double>>(),
                                                         c.data<std::complex<double>>() + c.numel())) {
    out.push_back(z.real());
    out.push_back(z.imag());
  }
  return out;
}

// complex64/complex128: sums and averages as pairs of reals (both parts), moves of 8- and 16-byte
// elements; max/min refused before any rank communicates, naming the dtype.
void scenario_complex(Backend& b) {
  auto world = b.new_group(world_ranks(), "world", kOkTimeout);
  const int me = b.rank();
  for (DType dt : {DType::kComplex64, DType::kComplex128}) {
    const std::string name = dtype_name(dt);
    // Rank r holds (r + 1) * (1 - 2i, 3 + 0.5i): the sum is 10 times that, the average 2.5 times.
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      Tensor t = make_complex({(me + 1) * 1.0, (me + 1) * -2.0, (me + 1) * 3.0, (me + 1) * 0.5}, dt);
      world->all_reduce(t, op, kOkTimeout);
      const double f = op == ReduceOp::kSum ? 10.0 : 2.5;
      WCHECK(complex_parts(t) == (std::vector<double>{f, -2 * f, 3 * f, 0.5 * f}), "all_reduce ",
             reduce_op_name(op), " ", name, ": got ", vec_str(complex_parts(t)));
    }
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
      Tensor t = make_complex({1.0, 2.0}, dt);
      bool refused = false;
      try {
        world->all_reduce(t, op, kOkTimeout);
      } catch (const Error& e) {
        refused = std::string(e.what()).find(name) != std::string::npos &&
                  std::string(e.what()).find("accepted for complex: sum, avg") != std::string::npos;
        WCHECK(refused, "all_reduce ", reduce_op_name(op), " ", name, " refused with: ", e.what());
      }
      WCHECK(refused, "all_reduce ", reduce_op_name(op), " ", name, " was not refused");
    }
    // all_gather: rank r contributes r + 1 elements (r, -r), (r + 0.25, 1).
    std::vector<int64_t> counts = {1, 2, 3, 4};
    std::vector<double> mine, expected;
    for (int r = 0; r < kWorld; ++r)
      for (int64_t i = 0; i < counts[r]; ++i) {
        for (double v : {r + 0.25 * i, -1.0 * r - i}) {
          expected.push_back(v);
          if (r == me) mine.push_back(v);
        }
      }
    Tensor out = Tensor::zeros({10}, dt);
    world->all_gather(make_complex(mine, dt), out, counts, kOkTimeout);
    WCHECK(complex_parts(out) == expected, "all_gather ", name, ": got ", vec_str(complex_parts(out)));
    // reduce_scatter sum: element j of every rank is (r + 1) * (j, 1 - j).
    std::vector<double> in_v;
    for (int j = 0; j < 10; ++j) in_v.insert(in_v.end(), {(me + 1) * 1.0 * j, (me + 1) * (1.0 - j)});
    Tensor rs = Tensor::zeros({counts[me]}, dt);
    world->reduce_scatter(make_complex(in_v, dt), rs, counts, ReduceOp::kSum, kOkTimeout);
    int64_t off = 0;
    for (int r = 0; r < me; ++r) off += counts[r];
    std::vector<double> want;
    for (int64_t i = 0; i < counts[me]; ++i) want.insert(want.end(), {10.0 * (off + i), 10.0 * (1.0 - (off + i))});
    WCHECK(complex_parts(rs) == want, "reduce_scatter ", name, ": got ", vec_str(complex_parts(rs)));
    // broadcast from rank 1.
    Tensor bc = me == 1 ? make_complex({1.5, -2.5, 3.5, 4.5}, dt) : Tensor::zeros({2}, dt);
    world->broadcast(bc, 1, kOkTimeout);
    WCHECK(complex_parts(bc) == (std::vector<double>{1.5, -2.5, 3.5, 4.5}), "broadcast ", name);
  }
}

void scenario_send_recv(Backend& b) {
  auto world = b.new_group(world_ranks(), "world", kOkTimeout);
  const int me = b.rank();
  const int next = (me + 1) % kWorld, prev = (me + kWorld - 1) % kWorld;
  // A ring with two tags per edge; sends and receives are posted in different tag orders.
  Tensor s0 = make({me * 1.0, me + 0.5}, DType::kFloat32);
  Tensor s1 = make({100.0 + me}, DType::kFloat32);
  Tensor r0 = Tensor::full({2}, -1.0), r1 = Tensor::full({1}, -1.0);
  std::vector<P2POp> ops = {{P2POp::kRecv, r1, prev, 1},
                            {P2POp::kSend, s0, next, 0},
                            {P2POp::kRecv, r0, prev, 0},
                            {P2POp::kSend, s1, next, 1}};
  world->batch_isend_irecv(ops, kOkTimeout);
  check_values(r0, {prev * 1.0, prev + 0.5}, "ring tag 0");
  check_values(r1, {100.0 + prev}, "ring tag 1");
  WCHECK(world->stats().bytes_sent == 12, world->stats().bytes_sent);
  // Same (peer, tag) twice: matched in posting order.
  if (me == 0) {
    world->send(make({1, 2, 3}, DType::kInt64), 2, 5, kOkTimeout);
    world->send(make({4, 5, 6}, DType::kInt64), 2, 5, kOkTimeout);
  } else if (me == 2) {
    Tensor a = Tensor::zeros({3}, DType::kInt64), c = Tensor::zeros({3}, DType::kInt64);
    world->recv(a, 0, 5, kOkTimeout);
    world->recv(c, 0, 5, kOkTimeout);
    check_values(a, {1, 2, 3}, "first tag-5 message");
    check_values(c, {4, 5, 6}, "second tag-5 message");
  }
  world->barrier(kOkTimeout);
}

void scenario_barrier(Backend& b) {
  auto world = b.new_group(world_ranks(), "world", kOkTimeout);
  world->barrier(kOkTimeout);
  // Nobody leaves the barrier before rank 0, which arrives 300 ms late.
  auto start = Clock::now();
  if (b.rank() == 0) std::this_thread::sleep_for(milliseconds(300));
  world->barrier(kOkTimeout);
  auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
  WCHECK(waited >= 250, "left the barrier after ", waited, " ms");
  world->barrier(kOkTimeout);
}

void scenario_subgroups(Backend& b) {
  const int me = b.rank();
  // Pairs {0, 2} and {1, 3}: group rank = position in the list.
  std::vector<int> pair = me % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{3, 1};
  auto g = b.new_group(pair, me % 2 == 0 ? "pairs/even" : "pairs/odd", kOkTimeout);
  WCHECK(g->size() == 2);
  WCHECK(g->rank() == (pair[0] == me ? 0 : 1), g->rank());
  Tensor t = make({me * 1.0, 1.0}, DType::kFloat32);
  g->all_reduce(t, ReduceOp::kSum, kOkTimeout);
  check_values(t, {me % 2 == 0 ? 2.0 : 4.0, 2.0}, "pair all_reduce");
  Tensor gathered = Tensor::zeros({2});
  g->all_gather(make({me * 1.0}, DType::kFloat32), gathered, {1, 1}, kOkTimeout);
  check_values(gathered, {pair[0] * 1.0, pair[1] * 1.0}, "pair all_gather");
  // A group of one.
  auto self = b.new_group({me}, absl::StrCat("self/", me), kOkTimeout);
  Tensor s = make({3.0}, DType::kFloat32);
  self->all_reduce(s, ReduceOp::kAvg, kOkTimeout);
  check_values(s, {3.0}, "self all_reduce");
  self->barrier(kOkTimeout);
  // The world group, twice under the same name: each is its own rendezvous.
  for (int k = 0; k < 2; ++k) {
    auto world = b.new_group(world_ranks(), "world", kOkTimeout);
    Tensor w = make({1.0}, DType::kInt64);
    world->all_reduce(w, ReduceOp::kSum, kOkTimeout);
    check_values(w, {4.0}, "world all_reduce");
  }
  // Argument errors are dtensor::Error, not hangs.
  bool threw = false;
  try {
    b.new_group({0, 0, 1}, "bad", kOkTimeout);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("twice") != std::string::npos;
  }
  WCHECK(threw);
}

// close(): groups still held (as DTensors hold them at exit) lose their connections and the TCP
// device's thread is gone: a collective on them is a CommError at once, new_group an Error; the
// process's thread count is back to what it was before the backend's first group.
int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

void scenario_close(Backend& b) {
  auto* gloo = dynamic_cast<GlooBackend*>(&b);
  WCHECK(gloo != nullptr);
  auto world = b.new_group(world_ranks(), "world", kOkTimeout);
  const bool even = b.rank() % 2 == 0;
  auto pair = b.new_group(even ? std::vector<int>{0, 2} : std::vector<int>{1, 3}, even ? "pair/even" : "pair/odd",
                          kOkTimeout);
  Tensor t = make({1.0}, DType::kFloat32);
  world->all_reduce(t, ReduceOp::kSum, kOkTimeout);
  check_values(t, {4.0}, "world all_reduce before close");
  const int with_groups = thread_count();
  world->barrier(kOkTimeout);  // nobody closes while a peer is still in the all_reduce
  gloo->close();
  const int after = thread_count();
  WCHECK(after < with_groups, "threads: ", with_groups, " with groups, ", after, " after close()");
  auto start = Clock::now();
  for (const auto& g : {world, pair}) {
    bool threw = false;
    try {
      Tensor u = make({1.0}, DType::kFloat32);
      g->all_reduce(u, ReduceOp::kSum, kOkTimeout);
    } catch (const CommError& e) {
      threw = std::string(e.what()).find("destroyed") != std::string::npos;
    }
    WCHECK(threw, "no CommError naming the destroyed group from ", g->describe());
  }
  WCHECK(Clock::now() - start < milliseconds(1000), "the closed groups waited");
  bool refused = false;
  try {
    b.new_group(world_ranks(), "again", kOkTimeout);
  } catch (const Error& e) {
    refused = std::string(e.what()).find("destroyed") != std::string::npos;
  }
  WCHECK(refused, "new_group after close()");
  gloo->close();  // idempotent
}

// The failing rank of the failure scenarios.
constexpr int kCulprit = 3;

// The culprit stays alive (and silent) until every other rank has exited, so that it is never found
// dead instead of silent, however slow the machine; at most 30 s.
void linger_until_others_exit(Backend& b) {
  auto* gloo = dynamic_cast<GlooBackend*>(&b);
  WCHECK(gloo != nullptr);
  auto deadline = Clock::now() + milliseconds(30000);
  for (int r = 0; r < kWorld; ++r) {
    if (r == b.rank()) continue;
    while (kill(gloo->peers()[r].pid, 0) == 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
}

// Runs `body`, which must throw a CommError whose message contains every one of `needles`, within
// kFailTimeout plus a margin.
void expect_comm_error(const std::function<void()>& body, const std::vector<std::string>& needles) {
  auto start = Clock::now();
  try {
    body();
  } catch (const CommError& e) {
    auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
    std::string msg = e.what();
    std::fprintf(stderr, "rank %s got the expected CommError after %lld ms: %s\n",
                 std::getenv("RANK"), static_cast<long long>(took), msg.c_str());
    for (const std::string& n : needles) {
      WCHECK(msg.find(n) != std::string::npos, "message lacks '", n, "': ", msg);
    }
    WCHECK(took < kFailTimeout.count() + 3000, "took ", took, " ms");
    return;
  }
  WCHECK(false, "no CommError");
}

// Rank 3 exits before it starts the backend: the others' start fails naming it.
void scenario_never_joins(int rank) {
  if (rank == kCulprit) return;
  expect_comm_error([] { init_backend_from_env(kFailTimeout); },
                    {"rank 3 did not join", "within 2000 ms"});
}

// Rank 3 starts but never joins the group.
void scenario_skips_group(Backend& b) {
  if (b.rank() == kCulprit) {
    linger_until_others_exit(b);
    return;
  }
  expect_comm_error([&] { b.new_group(world_ranks(), "mesh0/dim0", kFailTimeout); },
                    {"rank 3 did not join group 'mesh0/dim0' ranks [0, 1, 2, 3] within 2000 ms"});
}

// Rank 3 joins the group but never enters the all_reduce (alive and silent), nor sends what rank 0
// waits for.
void scenario_silent_peer(Backend& b) {
  auto world = b.new_group(world_ranks(), "world", kOkTimeout);
  auto p2p = b.new_group(world_ranks(), "p2p", kOkTimeout);
  if (b.rank() == kCulprit) {
    linger_until_others_exit(b);
    return;
  }
  Tensor t = Tensor::full({8}, 1.0);
  expect_comm_error([&] { world->all_reduce(t, ReduceOp::kSum, kFailTimeout); },
                    {"all_reduce", "group 'world'", "3 did not enter"});
  // The group is unusable now, and says so at once.
  expect_comm_error([&] { world->barrier(kFailTimeout); }, {"unusable"});
  // Point to point: the message names the pending receive.
  if (b.rank() == 0) {
    Tensor r = Tensor::zeros({4});
    expect_comm_error([&] { p2p->recv(r, kCulprit, 9, kFailTimeout); },
                      {"batch_isend_irecv on group 'p2p'",
                       "recv from rank 3 (tag 9, 16 bytes) did not complete; rank 3 is alive"});
  }
}

// Rank 3 dies between two all_reduces.
void scenario_peer_dies(Backend& b) {
  auto world = b.new_group(world_ranks(), "world", kOkTimeout);
  Tensor t = Tensor::full({1000}, 1.0);
  world->all_reduce(t, ReduceOp::kSum, kOkTimeout);
  world->barrier(kOkTimeout);
  if (b.rank() == kCulprit) {
    std::fflush(nullptr);
    _exit(1);
  }
  expect_comm_error([&] { world->all_reduce(t, ReduceOp::kSum, kFailTimeout); },
                    {"all_reduce", "on rank ", "peer rank 3 (pid ", "is no longer running"});
}

int worker_main(const std::string& scenario) {
  const int rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "-1");
  try {
    if (scenario == "never_joins") {
      scenario_never_joins(rank);
      return 0;
    }
    std::map<std::string, std::function<void(Backend&)>> scenarios = {
        {"all_reduce", scenario_all_reduce},
        {"all_gather", scenario_all_gather},
        {"reduce_scatter", scenario_reduce_scatter},
        {"all_to_all", scenario_all_to_all},
        {"broadcast", scenario_broadcast},
        {"complex", scenario_complex},
        {"send_recv", scenario_send_recv},
        {"barrier", scenario_barrier},
        {"subgroups", scenario_subgroups},
        {"close", scenario_close},
        {"skips_group", scenario_skips_group},
        {"silent_peer", scenario_silent_peer},
        {"peer_dies", scenario_peer_dies},
    };
    auto it = scenarios.find(scenario);
    WCHECK(it != scenarios.end(), "unknown scenario ", scenario);
    auto backend = init_backend_from_env(kOkTimeout);
    WCHECK(backend->rank() == rank && backend->world_size() == kWorld && backend->kind() == "gloo");
    it->second(*backend);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d, scenario %s: %s\n", rank, scenario.c_str(), e.what());
    return 1;
  }
}

// ------------------------------------------------------------------------------------------------
// Driver side.

tools::LaunchOptions options_for(const std::string& scenario) {
  tools::LaunchOptions o;
  o.nprocs = kWorld;
  o.command = {rank_worker::self_exe()};
  o.env = {{kScenarioVar, scenario}};
  o.timeout = milliseconds(60000);  // never hang the test
  o.kill_grace = milliseconds(2000);
  if (const char* t = std::getenv("TEST_TMPDIR")) o.tmp_root = t;
  return o;
}

std::string exits_str(const tools::LaunchResult& r) {
  std::vector<std::string> parts;
  for (const auto& x : r.ranks) {
    parts.push_back(absl::StrCat("rank ", x.rank, ": code ", x.exit_code, " signal ", x.signal));
  }
  return absl::StrJoin(parts, "; ");
}

void expect_all_pass(const std::string& scenario) {
  tools::LaunchResult r = tools::run_ranks(options_for(scenario));
  EXPECT_EQ(r.status, 0) << exits_str(r);
  EXPECT_FALSE(r.timed_out);
  for (const auto& x : r.ranks) EXPECT_TRUE(x.ok()) << "rank " << x.rank << ": " << exits_str(r);
}

TEST(Gloo, AllReduceEveryOpAndDtype) { expect_all_pass("all_reduce"); }
TEST(Gloo, AllGatherUnevenWithEmpty) { expect_all_pass("all_gather"); }
TEST(Gloo, ReduceScatterUneven) { expect_all_pass("reduce_scatter"); }
TEST(Gloo, AllToAllUneven) { expect_all_pass("all_to_all"); }
TEST(Gloo, Broadcast) { expect_all_pass("broadcast"); }
TEST(Gloo, ComplexSumsAsPairsAndRefusesOrder) { expect_all_pass("complex"); }
TEST(Gloo, BatchedSendRecvRing) { expect_all_pass("send_recv"); }
TEST(Gloo, Barrier) { expect_all_pass("barrier"); }
TEST(Gloo, SubGroups) { expect_all_pass("subgroups"); }
TEST(Gloo, CloseEndsLiveGroupsAndTheirThreads) { expect_all_pass("close"); }

TEST(GlooFailure, PeerNeverJoinsTheWorld) { expect_all_pass("never_joins"); }
TEST(GlooFailure, PeerSkipsNewGroup) { expect_all_pass("skips_group"); }
TEST(GlooFailure, SilentPeerInCollective) { expect_all_pass("silent_peer"); }

TEST(GlooFailure, PeerDiesMidRun) {
  tools::LaunchOptions o = options_for("peer_dies");
  o.failure_grace = milliseconds(30000);  // let the survivors report on their own
  auto start = Clock::now();
  tools::LaunchResult r = tools::run_ranks(o);
  auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
  EXPECT_EQ(r.first_failed, kCulprit) << exits_str(r);
  EXPECT_EQ(r.status, 1) << exits_str(r);
  EXPECT_EQ(r.ranks[kCulprit].exit_code, 1);
  for (int i = 0; i < kWorld; ++i) {
    if (i != kCulprit) {
      EXPECT_TRUE(r.ranks[i].ok()) << exits_str(r);
      EXPECT_FALSE(r.ranks[i].terminated);
    }
  }
  EXPECT_LT(took, 20000);
}

// ------------------------------------------------------------------------------------------------
// Environment and launcher, in the driver process.

class ScopedEnv {
 public:
  ScopedEnv(std::vector<std::pair<std::string, const char*>> vars) {
    for (auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      if (value) {
        setenv(name.c_str(), value, 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  ~ScopedEnv() {
    for (auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(Env, ListsWhatIsMissing) {
  ScopedEnv env({{"RANK", nullptr},
                 {"OMPI_COMM_WORLD_RANK", nullptr},
                 {"PMI_RANK", nullptr},
                 {"SLURM_PROCID", nullptr},
                 {"WORLD_SIZE", "4"},
                 {"DTENSOR_STORE", nullptr},
                 {"TORCHELASTIC_RUN_ID", nullptr}});
  try {
    read_process_env();
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("RANK (or OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("DTENSOR_STORE"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("WORLD_SIZE"), std::string::npos) << msg;
  }
}

// torchrun sets no DTENSOR_STORE: one host gets a file store named by the job; several hosts
// (LOCAL_WORLD_SIZE < WORLD_SIZE) keep the error, which says why.
TEST(Env, TorchrunOnOneHostDefaultsToAFileStore) {
  using Vars = std::vector<std::pair<std::string, const char*>>;  // one pair: not a copy of a ScopedEnv
  ScopedEnv env({{"RANK", "1"},
                 {"WORLD_SIZE", "4"},
                 {"LOCAL_WORLD_SIZE", "4"},
                 {"DTENSOR_STORE", nullptr},
                 {"TORCHELASTIC_RUN_ID", "run/1 x"},
                 {"TORCHELASTIC_RESTART_COUNT", "2"},
                 {"MASTER_ADDR", "localhost"},
                 {"MASTER_PORT", "29511"},
                 {"TMPDIR", "/scratch"}});
  EXPECT_EQ(read_process_env().store, "file:/scratch/dtensor-store-run_1_x-29511-2");
  {
    // --master-port jobs all have the run id "none": the agent's pid (this process's parent) is added.
    ScopedEnv static_rdzv(Vars{{"TORCHELASTIC_RUN_ID", "none"}});
    EXPECT_EQ(read_process_env().store, absl::StrCat("file:/scratch/dtensor-store-none-", getppid(), "-29511-2"));
  }
  {
    ScopedEnv explicit_store(Vars{{"DTENSOR_STORE", "redis://h:1"}});
    EXPECT_EQ(read_process_env().store, "redis://h:1");
  }
  {
    ScopedEnv two_hosts(Vars{{"LOCAL_WORLD_SIZE", "2"}});
    try {
      read_process_env();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DTENSOR_STORE (file:/shared/dir or redis://host:port; torchrun "
                                           "across hosts"),
                std::string::npos)
          << e.what();
    }
  }
  ScopedEnv not_torchrun(Vars{{"MASTER_PORT", nullptr}});
  EXPECT_THROW(read_process_env(), Error);
}

TEST(Env, FallbacksAndValidation) {
  {
    ScopedEnv env({{"RANK", nullptr},
                   {"WORLD_SIZE", nullptr},
                   {"LOCAL_RANK", nullptr},
                   {"OMPI_COMM_WORLD_RANK", nullptr},
                   {"OMPI_COMM_WORLD_SIZE", nullptr},
                   {"PMI_RANK", nullptr},
                   {"PMI_SIZE", nullptr},
                   {"SLURM_PROCID", "5"},
                   {"SLURM_NTASKS", "8"},
                   {"SLURM_LOCALID", "1"},
                   {"DTENSOR_STORE", "file:/tmp/x"}});
    ProcessEnv p = read_process_env();
    EXPECT_EQ(p.rank, 5);
    EXPECT_EQ(p.world_size, 8);
    EXPECT_EQ(p.local_rank, 1);
    EXPECT_EQ(p.store, "file:/tmp/x");
  }
  {
    ScopedEnv env({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"DTENSOR_STORE", "file:/tmp/x"}});
    EXPECT_THROW(read_process_env(), Error);
  }
  {
    ScopedEnv env({{"RANK", "zero"}, {"WORLD_SIZE", "4"}, {"DTENSOR_STORE", "file:/tmp/x"}});
    EXPECT_THROW(read_process_env(), Error);
  }
  // The launcher's restart count: an integer >= 0 (0 when unset), else an error naming it.
  for (const char* bad : {"-1", "x", "\xff", "99999999999999999999"}) {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"DTENSOR_STORE", "file:/tmp/x"},
                   {"DTENSOR_RESTART_COUNT", bad}});
    try {
      read_process_env();
      ADD_FAILURE() << "DTENSOR_RESTART_COUNT='" << bad << "' accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("DTENSOR_RESTART_COUNT='") != std::string::npos ||
                  what.find("restart count -1 is negative") != std::string::npos) << what;
    }
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"DTENSOR_STORE", "file:/tmp/x"},
                   {"DTENSOR_RESTART_COUNT", "2"}});
    EXPECT_EQ(read_process_env().restart, 2);
  }
  EXPECT_THROW(open_store("tcp://host:1"), Error);
  EXPECT_THROW(open_store("redis://127.0.0.1:notaport"), Error);
  EXPECT_THROW(open_store("redis://127.0.0.1:1"), CommError);  // nothing listens there
  EXPECT_THROW(GlooBackend(2, 2, "file:/tmp/x"), Error);
}

TEST(Launcher, ReportsTheFailedRankAndStopsTheOthers) {
  tools::LaunchOptions o;
  o.nprocs = 3;
  o.command = {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 7; fi; exec sleep 30"};
  o.kill_grace = milliseconds(2000);
  if (const char* t = std::getenv("TEST_TMPDIR")) o.tmp_root = t;
  testing::internal::CaptureStderr();
  auto start = Clock::now();
  tools::LaunchResult r = tools::run_ranks(o);
  auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.status, 7);
  EXPECT_EQ(r.first_failed, 1);
  EXPECT_NE(err.find("dtensor launch: rank 1 exited with code 7"), std::string::npos) << err;
  EXPECT_TRUE(r.ranks[0].terminated);
  EXPECT_EQ(r.ranks[0].signal, SIGTERM);
  EXPECT_LT(took, 10000);
}

TEST(Launcher, SignalsTimeoutAndEnvironment) {
  std::string tmp = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  {
    tools::LaunchOptions o;
    o.nprocs = 2;
    o.command = {"/bin/sh", "-c", "if [ \"$RANK\" = 0 ]; then kill -9 $$; fi; exec sleep 30"};
    o.tmp_root = tmp;
    o.quiet = true;
    tools::LaunchResult r = tools::run_ranks(o);
    EXPECT_EQ(r.status, 128 + 9);
    EXPECT_EQ(r.ranks[0].signal, 9);
  }
  {
    tools::LaunchOptions o;
    o.nprocs = 2;
    o.command = {"sleep", "30"};
    o.timeout = milliseconds(300);
    o.tmp_root = tmp;
    o.quiet = true;
    tools::LaunchResult r = tools::run_ranks(o);
    EXPECT_TRUE(r.timed_out);
    EXPECT_EQ(r.status, 124);
  }
  {
    // Every rank sees its variables and a store directory that exists while it runs.
    tools::LaunchOptions o;
    o.nprocs = 4;
    o.command = {"/bin/sh", "-c",
                 "[ \"$WORLD_SIZE\" = 4 ] && [ \"$LOCAL_RANK\" = \"$RANK\" ] && "
                 "[ \"$LOCAL_WORLD_SIZE\" = 4 ] && [ -d \"${DTENSOR_STORE#file:}\" ] && "
                 "[ \"$EXTRA\" = yes ]"};
    o.env = {{"EXTRA", "yes"}};
    o.tmp_root = tmp;
    EXPECT_EQ(tools::run_ranks(o).status, 0);
  }
  {
    tools::LaunchOptions o;
    o.command = {"/nonexistent/program"};
    o.tmp_root = tmp;
    o.quiet = true;
    EXPECT_EQ(tools::run_ranks(o).status, 127);
  }
}

}  // namespace
}  // namespace dtensor

int main(int argc, char** argv) {
  if (const char* scenario = std::getenv(dtensor::kScenarioVar)) {
    return dtensor::worker_main(scenario);
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
