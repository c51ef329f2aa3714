// GPU tier: what Plan::run must guarantee beyond the arithmetic (issue 19): buffers smaller than
// what the kernels touch are rejected at plan time, runs of one plan never overlap (streams,
// graphs), clear errors for moved-from plans, the caller's pending CUDA errors and foreign
// streams, and grids that fit any M and group count on the reference kernel.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fp4gemm/fp4gemm.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

bool fast_kernel_available() { return device_count() > 0 && device_info().has_fast_kernel; }

#define REQUIRE_FAST_KERNEL() \
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the fused kernel cannot run here"

// Expects `f()` to throw fp4gemm::Error naming `argument`, with `needle` in its message.
template <typename F>
void expect_error(F&& f, const std::string& argument, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected fp4gemm::Error naming " << argument << "; nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Spins until *flag != 0 (host-mapped memory) or `timeout_ns` passed, so a test can hold a
// stream back while it looks at what the other streams did.
__global__ void hold_until(const volatile int* flag, unsigned long long timeout_ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (*flag == 0 && now - start < timeout_ns);
}

class HostFlag {
 public:
  HostFlag() {
    FP4GEMM_TEST_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host_), sizeof(int), cudaHostAllocMapped));
    *host_ = 0;
    FP4GEMM_TEST_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0));
  }
  ~HostFlag() { cudaFreeHost(host_); }
  void release() { *reinterpret_cast<volatile int*>(host_) = 1; }
  const int* device() const { return device_; }

 private:
  int* host_ = nullptr;
  int* device_ = nullptr;
};

class Stream {
 public:
  Stream() { FP4GEMM_TEST_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s_); }
  operator cudaStream_t() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// Holds `held` back behind a spinning kernel, runs `enqueue()` (work queued behind the hold and
// on `watched`), records an event on `watched` and returns whether it was still pending 300 ms
// later; then releases the hold and synchronises the device.
bool pending_while_held(cudaStream_t held, cudaStream_t watched, const std::function<void()>& enqueue) {
  HostFlag flag;
  cudaEvent_t done;
  FP4GEMM_TEST_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  hold_until<<<1, 1, 0, held>>>(flag.device(), 5'000'000'000ull);
  FP4GEMM_TEST_CUDA(cudaGetLastError());
  enqueue();
  FP4GEMM_TEST_CUDA(cudaEventRecord(done, watched));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const cudaError_t state = cudaEventQuery(done);
  flag.release();
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
  FP4GEMM_TEST_CUDA(cudaEventDestroy(done));
  return state == cudaErrorNotReady;
}

// The graph of one run of `plan` captured on `stream` (its serialising wait and record are
// external-event nodes).
cudaGraphExec_t capture_run(const Plan& plan, cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  FP4GEMM_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  plan.run(stream);
  FP4GEMM_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  FP4GEMM_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  FP4GEMM_TEST_CUDA(cudaGraphDestroy(graph));
  return exec;
}

ProblemConfig small_case(ScaleLayout layout = ScaleLayout::blocked) {
  ProblemConfig cfg;
  cfg.layout = layout;
  cfg.seed = 1919;
  cfg.shapes = {{200, 200, 512}, {100, 256, 512}};  // {M, N, K}; N = 200 pads to 256 blocked rows
  return cfg;
}

// Item 7: blocked scales allocated at the linear size. The scales sit at the very end of a 2 MiB
// allocation, so the padded rows (200 -> 256) run past it whatever the allocator's rounding.
TEST(RunSafety, ScalesShorterThanTheLayoutRejected) {
  REQUIRE_FAST_KERNEL();
  const Problem problem = make_problem(small_case(ScaleLayout::blocked));
  const DeviceProblem device(problem);
  const std::size_t arena = std::size_t{2} << 20;
  DeviceBuffer buffer(arena);
  const int cols = 512 / 16;
  const std::size_t linear_bytes = static_cast<std::size_t>(problem.groups[0].n) * cols;  // 6400 < 8192 blocked
  ASSERT_EQ(linear_bytes, 6400u);
  std::vector<GroupDesc> descs = device.descs();
  descs[0].sfb = buffer.get() + arena - linear_bytes;
  for (Backend backend : {Backend::fast, Backend::reference})
    expect_error([&] { Plan plan(descs, device.options(backend)); }, "groups[0].sfb", "bytes short");
  // A pointer past the allocation's end is named too: it lies in no allocation, or (when the
  // driver placed another allocation right behind the arena, seen on an H200) in one too short.
  descs = device.descs();
  descs[1].a = buffer.get() + arena;
  try {
    Plan plan(descs, device.options(Backend::fast));
    ADD_FAILURE() << "a pointer past the arena's end accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.argument(), "groups[1].a") << what;
    EXPECT_TRUE(what.find("not in any device allocation") != std::string::npos ||
                what.find("bytes short") != std::string::npos)
        << what;
  }
  // Exactly the blocked size at the end of the allocation is accepted and right.
  descs = device.descs();
  const std::vector<std::uint8_t>& sfb = problem.groups[0].sfb;
  ASSERT_EQ(sfb.size(), 8192u);
  std::uint8_t* tail = buffer.get() + arena - sfb.size();
  FP4GEMM_TEST_CUDA(cudaMemcpy(tail, sfb.data(), sfb.size(), cudaMemcpyHostToDevice));
  descs[0].sfb = tail;
  EXPECT_NO_THROW((void)Plan(descs, device.options(Backend::fast)));
}

// Item 8: two runs of one plan on two streams never overlap. Stream 1's run is held back behind a
// spinning kernel; stream 2's run (plain, or replayed from a graph) must wait for it.
class RunSafetySerialised : public ::testing::TestWithParam<Launch> {};

TEST_P(RunSafetySerialised, SecondStreamWaitsForTheFirst) {
  REQUIRE_FAST_KERNEL();
  const Problem problem = make_problem(small_case());
  const DeviceProblem device(problem);
  const Expected expected = cpu_expected(problem);
  for (Backend backend : {Backend::fast, Backend::reference}) {
    SCOPED_TRACE(to_string(backend));
    const Plan plan(device.descs(), device.options(backend));
    Stream s1, s2;
    // captured before the hold: the graph's wait is external
    const cudaGraphExec_t exec = GetParam() == Launch::graph ? capture_run(plan, s2) : nullptr;
    device.reset();
    EXPECT_TRUE(pending_while_held(s1, s2, [&] {
      plan.run(s1);
      if (exec) FP4GEMM_TEST_CUDA(cudaGraphLaunch(exec, s2));
      else plan.run(s2);
    })) << "the second stream's run finished while the first run was held back";
    if (exec) FP4GEMM_TEST_CUDA(cudaGraphExecDestroy(exec));
    EXPECT_TRUE(check_outputs(problem, device, expected, device.download()));
  }
}

INSTANTIATE_TEST_SUITE_P(Launches, RunSafetySerialised, ::testing::Values(Launch::stream, Launch::graph),
                         [](const auto& info) { return info.param == Launch::stream ? "stream" : "graph"; });

// A run leaves out its wait for the previous run when that one was eager on the same stream; a
// graph replay records the plan's event on its own stream without the plan seeing it, so once a
// run was captured every later run waits again: eager on s1, a replay on s2 held back, eager on s1
// -- the last must wait for the replay.
TEST(RunSafety, EagerRunAfterAGraphReplayWaitsForIt) {
  REQUIRE_FAST_KERNEL();
  const Problem problem = make_problem(small_case());
  const DeviceProblem device(problem);
  const Expected expected = cpu_expected(problem);
  const Plan plan(device.descs(), device.options(Backend::fast));
  Stream s1, s2;
  const cudaGraphExec_t exec = capture_run(plan, s2);
  device.reset();
  plan.run(s1);
  FP4GEMM_TEST_CUDA(cudaStreamSynchronize(s1));
  EXPECT_TRUE(pending_while_held(s2, s1, [&] {
    FP4GEMM_TEST_CUDA(cudaGraphLaunch(exec, s2));
    plan.run(s1);
  })) << "the eager run finished while the graph replay before it was held back";
  FP4GEMM_TEST_CUDA(cudaGraphExecDestroy(exec));
  EXPECT_TRUE(check_outputs(problem, device, expected, device.download()));
}

// Eager runs on one stream keep their order without the wait, and a run on another stream after
// them still waits: s1 held back with two runs behind it, then a run on s2 must not finish first.
TEST(RunSafety, RunOnAnotherStreamWaitsForSameStreamRuns) {
  REQUIRE_FAST_KERNEL();
  const Problem problem = make_problem(small_case());
  const DeviceProblem device(problem);
  const Expected expected = cpu_expected(problem);
  const Plan plan(device.descs(), device.options(Backend::fast));
  Stream s1, s2;
  device.reset();
  EXPECT_TRUE(pending_while_held(s1, s2, [&] {
    plan.run(s1);
    plan.run(s1);
    plan.run(s2);
  })) << "the second stream's run finished while the first stream was held back";
  EXPECT_TRUE(check_outputs(problem, device, expected, device.download()));
}

// Item 8, under load: two host threads run one plan on two streams many times; every result right.
TEST(RunSafety, ConcurrentThreadsOnOnePlan) {
  REQUIRE_FAST_KERNEL();
  ProblemConfig cfg = small_case();
  cfg.shapes = {{40, 4096, 2048}, {70, 4096, 2048}};  // few tiles: stream-K partials and tile flags in use
  const Problem problem = make_problem(cfg);
  const DeviceProblem device(problem);
  const Expected expected = cpu_expected(problem);
  const Plan plan(device.descs(), device.options(Backend::fast));
  device.reset();
  auto worker = [&](int) {
    Stream s;
    for (int i = 0; i < 50; ++i) plan.run(s);
    FP4GEMM_TEST_CUDA(cudaStreamSynchronize(s));
  };
  std::thread t1(worker, 1), t2(worker, 2);
  t1.join();
  t2.join();
  EXPECT_TRUE(check_outputs(problem, device, expected, device.download()));
}

// Eager runs from the second on launch a graph of the plan's launches: each of six runs checked
// with alternating poisons (every element written every time), on a stream-K shape (partials and
// tile flags the kernels reset) and on the reference backend; the replay count says the graph ran.
TEST(RunSafety, RepeatedRunsReplayTheirGraph) {
  REQUIRE_FAST_KERNEL();
  ProblemConfig cfg = small_case();
  cfg.shapes = {{40, 4096, 2048}, {70, 4096, 2048}};
  const Problem problem = make_problem(cfg);
  const DeviceProblem device(problem);
  const Expected expected = cpu_expected(problem);
  for (Backend backend : {Backend::fast, Backend::reference}) {
    SCOPED_TRACE(to_string(backend));
    const Plan plan(device.descs(), device.options(backend));
    for (int i = 0; i < 6; ++i) {
      const Poison poison = i % 2 != 0 ? Poison::finite : Poison::nan;
      EXPECT_TRUE(check_outputs(problem, device, expected, run_plan(plan, device, Launch::stream, poison)))
          << "run " << i;
    }
    EXPECT_EQ(plan.graph_replays(), 5u) << "run 0 launches directly, runs 1-5 from the graph";
  }
}

// Item 10: a moved-from plan, a pending error of the caller's, a stream of another device.
TEST(RunSafety, MovedFromPlanThrows) {
  REQUIRE_FAST_KERNEL();
  const Problem problem = make_problem(small_case());
  const DeviceProblem device(problem);
  Plan a(device.descs(), device.options(Backend::fast));
  Plan b(std::move(a));
  expect_error([&] { a.run(); }, "plan", "moved from");
  expect_error([&] { (void)a.describe(); }, "plan", "moved from");
  expect_error([&] { (void)a.kernel_name(); }, "plan", "moved from");
  expect_error([&] { (void)a.num_groups(); }, "plan", "moved from");
  expect_error([&] { (void)a.options(); }, "plan", "moved from");
  expect_error([&] { (void)a.flops(); }, "plan", "moved from");
  EXPECT_EQ(b.num_groups(), 2);
  a = std::move(b);  // assignment revives it
  EXPECT_EQ(a.num_groups(), 2);
}

TEST(RunSafety, PendingCallerErrorIsNamedAsSuch) {
  REQUIRE_FAST_KERNEL();
  const Problem problem = make_problem(small_case());
  const DeviceProblem device(problem);
  const Plan plan(device.descs(), device.options(Backend::fast));
  void* p = nullptr;
  ASSERT_NE(cudaMalloc(&p, std::size_t{1} << 60), cudaSuccess);  // leaves cudaErrorMemoryAllocation pending
  expect_error([&] { plan.run(); }, "run", "earlier call");
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // The next run is unaffected.
  EXPECT_NO_THROW(plan.run());
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
}

TEST(RunSafety, StreamOfAnotherDeviceRejected) {
  REQUIRE_FAST_KERNEL();
  if (device_count() < 2) GTEST_SKIP() << "needs two GPUs (" << device_count() << " visible)";
  const Problem problem = make_problem(small_case());
  const DeviceProblem device(problem);
  const Plan plan(device.descs(), device.options(Backend::fast));
  int current = 0;
  FP4GEMM_TEST_CUDA(cudaGetDevice(&current));
  FP4GEMM_TEST_CUDA(cudaSetDevice(current == 0 ? 1 : 0));
  cudaStream_t other = nullptr;
  FP4GEMM_TEST_CUDA(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  FP4GEMM_TEST_CUDA(cudaSetDevice(current));
  expect_error([&] { plan.run(other); }, "stream", "device");
  cudaStreamDestroy(other);
}

// Item 2: the reference kernel's grid fits any M (its y dimension used to exceed 65535 blocks for
// M > 524280) and any group count.
TEST(RunSafety, ReferenceKernelLargeM) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  ProblemConfig cfg;
  cfg.seed = 524281;
  cfg.shapes = {{600000, 16, 64}, {0, 0, 0}, {3, 24, 128}};
  RunOptions options;
  options.mac_budget = 2.0e6;  // sampled reference rows; every element is checked as written
  EXPECT_TRUE(run_and_check(cfg, Backend::reference, options));
}

}  // namespace
}  // namespace fp4gemm::test
