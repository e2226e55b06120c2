#include "dtensor/collectives/threads_backend.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace dtensor {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<ProcessGroup> world_group(Backend& b) {
  std::vector<int> all(b.world_size());
  for (int r = 0; r < b.world_size(); ++r) all[r] = r;
  return b.new_group(all, "world", 2000ms);
}

TEST(ThreadsBackend, AllReduceEveryOp) {
  run_threads(4, [](std::shared_ptr<Backend> b) {
    auto pg = world_group(*b);
    int r = b->rank();
    for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt64}) {
      // rank r holds [r+1, -(r+1), 2r]: sum = [10, -10, 12], max = [4, -1, 6], min = [1, -4, 0].
      auto make = [&] {
        return Tensor::from_vector<double>({r + 1.0, -(r + 1.0), 2.0 * r}, {3}).to(dt);
      };
      Tensor s = make(), mx = make(), mn = make(), av = make();
      pg->all_reduce(s, ReduceOp::kSum);
      pg->all_reduce(mx, ReduceOp::kMax);
      pg->all_reduce(mn, ReduceOp::kMin);
      pg->all_reduce(av, ReduceOp::kAvg);
      EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{10, -10, 12}));
      EXPECT_EQ(mx.to_vector<double>(), (std::vector<double>{4, -1, 6}));
      EXPECT_EQ(mn.to_vector<double>(), (std::vector<double>{1, -4, 0}));
      if (dt == DType::kInt64) {
        EXPECT_EQ(av.to_vector<double>(), (std::vector<double>{2, -2, 3}));  // truncates
      } else {
        EXPECT_EQ(av.to_vector<double>(), (std::vector<double>{2.5, -2.5, 3}));
      }
    }
  });
}

TEST(ThreadsBackend, UnevenGatherScatterAllToAll) {
  run_threads(3, [](std::shared_ptr<Backend> b) {
    auto pg = world_group(*b);
    int r = b->rank();
    // all_gather: rank r contributes r elements of value r (rank 0 nothing).
    std::vector<int64_t> counts{0, 1, 2};
    Tensor in = Tensor::full({counts[r]}, r);
    Tensor out = Tensor::empty({3});
    pg->all_gather(in, out, counts);
    EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2, 2}));
    // reduce_scatter: blocks of 2, 0, 1 elements; every rank sends [r, r, r].
    std::vector<int64_t> rc{2, 0, 1};
    Tensor rin = Tensor::full({3}, r + 1);
    Tensor rout = Tensor::empty({rc[r]});
    pg->reduce_scatter(rin, rout, rc, ReduceOp::kSum);
    EXPECT_EQ(rout.to_vector<float>(), std::vector<float>(rc[r], 6.0f));
    // all_to_all: rank r sends (r + q) copies... sends q+1 elements of value 10r+q to rank q.
    std::vector<int64_t> sc{1, 2, 3}, recv(3, r + 1);
    std::vector<float> send;
    for (int q = 0; q < 3; ++q)
      for (int k = 0; k <= q; ++k) send.push_back(10.0f * r + q);
    Tensor ain = Tensor::from_vector(send, {6});
    Tensor aout = Tensor::empty({3 * (r + 1)});
    pg->all_to_all(ain, sc, aout, recv);
    std::vector<float> want;
    for (int s = 0; s < 3; ++s)
      for (int k = 0; k <= r; ++k) want.push_back(10.0f * s + r);
    EXPECT_EQ(aout.to_vector<float>(), want);
  });
}

// The ProcessGroup front (process_group.h): non-contiguous tensors are staged through contiguous
// copies, bytes are counted by comm_bytes_sent, and bad arguments are refused before any rank waits.
TEST(ThreadsBackend, FrontStagesNonContiguousCountsBytesAndChecksArguments) {
  run_threads(2, [](std::shared_ptr<Backend> b) {
    auto pg = world_group(*b);
    const int r = b->rank();
    // A transposed [3, 2] view of a [2, 3] tensor, reduced in place: the result lands in the view.
    Tensor base = Tensor::from_vector<float>({1.0f + 10 * r, 2.0f + 10 * r, 3.0f + 10 * r, 4.0f + 10 * r,
                                              5.0f + 10 * r, 6.0f + 10 * r},
                                             {2, 3});
    Tensor view = base.transpose(0, 1);
    ASSERT_FALSE(view.is_contiguous());
    const int64_t before = pg->stats().bytes_sent;
    pg->all_reduce(view, ReduceOp::kSum);
    EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{12, 14, 16, 18, 20, 22}));
    EXPECT_EQ(pg->stats().bytes_sent - before, comm_bytes_sent(CommKind::kAllReduce, 6 * 4, 2));
    EXPECT_EQ(comm_bytes_sent(CommKind::kAllReduce, 24, 2), 24);  // 2 (n-1)/n of 24 B on 2 ranks
    // all_gather into a non-contiguous output.
    Tensor out_base = Tensor::zeros({2, 2});
    Tensor out = out_base.transpose(0, 1);  // column r of out_base gets rank r's pair
    Tensor in = Tensor::from_vector<float>({1.0f + r, 3.0f + r}, {2});
    pg->all_gather(in, out, {2, 2});
    EXPECT_EQ(out_base.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
    // Refused on each rank alike, naming the call and what is accepted; nobody waits.
    Tensor t = Tensor::empty({4});
    try {
      Tensor two = Tensor::empty({2});
      pg->all_gather(two, t, {2, 1});
      ADD_FAILURE() << "counts that do not sum to the output were accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("all_gather on group 'world'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("sum to 3 elements; the tensor has 4"), std::string::npos) << e.what();
    }
    EXPECT_THROW(pg->broadcast(t, 2), Error);
    EXPECT_THROW(pg->send(t, r), Error);  // to itself
    Tensor f64 = Tensor::empty({4}, DType::kFloat64);
    EXPECT_THROW(pg->all_reduce(t, f64, ReduceOp::kSum), Error);
    // A reduce_scatter output inside its own input (this rank's block) is refused: backends read
    // this rank's block of the input after writing the output.
    try {
      Tensor own = t.narrow(0, 2 * r, 2);
      pg->reduce_scatter(t, own, {2, 2}, ReduceOp::kSum);
      ADD_FAILURE() << "a reduce_scatter output overlapping its input was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("reduce_scatter on group 'world'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("overlaps input"), std::string::npos) << e.what();
    }
    pg->barrier();  // the group is still usable
  });
}

TEST(ThreadsBackend, BroadcastP2PAndSubgroups) {
  run_threads(4, [](std::shared_ptr<Backend> b) {
    int r = b->rank();
    auto pg = world_group(*b);
    Tensor t = Tensor::full({2}, r == 2 ? 7.0 : 0.0);
    pg->broadcast(t, 2);
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{7, 7}));
    // Ring exchange in one batch: send to r+1, receive from r-1.
    std::vector<P2POp> ops{{P2POp::kSend, Tensor::full({3}, r), (r + 1) % 4, 5},
                           {P2POp::kRecv, Tensor::empty({3}), (r + 3) % 4, 5}};
    pg->batch_isend_irecv(ops);
    EXPECT_EQ(ops[1].tensor.to_vector<float>(), std::vector<float>(3, (r + 3) % 4));
    // Sub-groups {0,2} and {1,3}.
    auto sub = b->new_group(r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3},
                            "pairs", 2000ms);
    Tensor s = Tensor::full({1}, r);
    sub->all_reduce(s, ReduceOp::kSum);
    EXPECT_EQ(s.item(), r % 2 == 0 ? 2.0 : 4.0);
    EXPECT_EQ(sub->stats().calls, 1);
    pg->barrier();
  });
}

TEST(ThreadsBackend, SilentPeerTimesOutNamingIt) {
  auto world = make_threads_world(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> ts;
  for (int r = 0; r < 3; ++r) {
    ts.emplace_back([&, r] {
      auto b = threads_backend(world, r);
      try {
        auto pg = world_group(*b);
        if (r == 2) return;  // never joins the all_reduce
        Tensor t = Tensor::full({4}, 1.0);
        pg->all_reduce(t, ReduceOp::kSum, 300ms);
      } catch (const CommError& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("rank(s) 2 did not join"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("all_reduce"), std::string::npos) << errors[r];
  }
}

TEST(ThreadsBackend, FailingRankAbortsTheOthersFast) {
  auto start = std::chrono::steady_clock::now();
  try {
    run_threads(4, [](std::shared_ptr<Backend> b) {
      auto pg = world_group(*b);
      if (b->rank() == 1) throw Error("rank 1 exploded");
      Tensor t = Tensor::full({4}, 1.0);
      pg->all_reduce(t, ReduceOp::kSum);  // default timeout is minutes: must not wait for it
    });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 exploded"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(ThreadsBackend, MismatchedCallsFailEveryRank) {
  EXPECT_THROW(run_threads(2,
                           [](std::shared_ptr<Backend> b) {
                             auto pg = world_group(*b);
                             Tensor t = Tensor::full({b->rank() + 1}, 1.0);
                             pg->all_reduce(t, ReduceOp::kSum, 2000ms);
                           }),
               Error);
}

}  // namespace
}  // namespace dtensor
