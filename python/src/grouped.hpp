// The Python-facing grouped GEMM: argument parsing, the cached fast path, the host reference
// path, and GroupedGemm (a plan bound once to its arrays).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fp4gemm/moe.hpp"
#include "groups.hpp"
#include "plan_cache.hpp"
#include "tensor_view.hpp"

namespace fp4gemm::python {

// One argument list (a, b, ...): the caller's tuple, or a snapshot (a list is copied into a
// tuple, any other iterable materialised), so that `items` stays valid and owned for the whole
// call even if the caller's list is changed meanwhile (by another thread while the GIL is
// released, or by Python code the array probes run).
struct Seq {
  nb::object owner;  // the tuple holding the items
  Py_ssize_t size = 0;
  PyObject* const* items = nullptr;
};

inline constexpr int kPerGroup = 5;  // a, b, sfa, sfb, c

// The five per-group lists of one call, gathered once. `objects` (group-major: a, b, sfa, sfb, c
// of group 0, then group 1, ...) are borrowed from `seqs`, valid as long as this object lives.
struct CallArgs {
  Seq seqs[kPerGroup];
  int groups = 0;
  std::vector<PyObject*> objects;
};

// Everything one call resolves from its arguments.
struct Prepared {
  CallOptions options;
  std::vector<GroupDesc> groups;
  Placement placement;
  Framework framework = Framework::other;  // of a[0]; decides the default stream
  std::vector<std::uint64_t> key;          // plan-cache key (CUDA calls)
  std::vector<TensorView> views;           // one per CallArgs::objects entry, as read
  bool alpha_is_array = false;             // alpha given as an array: alpha_view is its view
  TensorView alpha_view;
};

// One grouped_gemm call on arrays read elsewhere (torch.ops.fp4gemm.grouped_gemm(_out)'s native
// kernels, torch_native.cpp): group-major views (a, b, sfa, sfb, c of group 0, then group 1,
// ...), alpha as one number per group (empty: none) or an array, the options by name (backend ""
// for the default).
struct GroupedViewsCall {
  int groups = 0;
  std::vector<TensorView> views;
  std::vector<float> alpha_values;
  bool alpha_is_array = false;
  TensorView alpha_view;
  std::string format, scale_layout, out_dtype, backend;
};

class Binding {
 public:
  static Binding& get();

  // fp4gemm.grouped_gemm minus output allocation (c is required here).
  void grouped_gemm(nb::handle a, nb::handle b, nb::handle sfa, nb::handle sfb, nb::handle c, nb::handle alpha,
                    nb::handle format, nb::handle scale_layout, nb::handle out_dtype, nb::handle backend,
                    nb::handle stream, int threads);

  // The same on arrays read elsewhere (GroupedViewsCall), CUDA arrays only, on `stream`; remembers
  // the call for replay_views. Needs the GIL.
  void grouped_gemm_views(const GroupedViewsCall& call, cudaStream_t stream);
  // Runs `call` with the plan of the last grouped_gemm_views call when every array (address,
  // shape, strides, dtype, device, storage bounds) and option is that call's (and the plan is
  // still cached); false (nothing enqueued) otherwise. Needs no GIL.
  bool replay_views(const GroupedViewsCall& call, cudaStream_t stream);

  // fp4gemm.dual_gemm minus output allocation: the dual GEMM in one call, through the same call memo
  // and plan cache (dual.cpp). batches: every array has GPU MODE's trailing batch dimension l, and
  // an entry of l > 1 is l groups (views along it, made only when the call is planned).
  void dual_gemm(nb::handle a, nb::handle b1, nb::handle b2, nb::handle sfa, nb::handle sfb1, nb::handle sfb2,
                 nb::handle c, nb::handle format, nb::handle scale_layout, nb::handle out_dtype,
                 const std::string& activation, float swiglu_alpha, float swiglu_limit, nb::handle stream,
                 int threads, bool batches = false);
  // Checks the five lists (one entry per group) and snapshots them.
  CallArgs gather(nb::handle a, nb::handle b, nb::handle sfa, nb::handle sfb, nb::handle c);
  // Reads and validates every array of `args` without running anything (also for GroupedGemm).
  // The views point into the arrays: `args` and `keep` must outlive any use of the result.
  Prepared prepare(const CallOptions& options, const CallArgs& args, nb::handle alpha, Keepalive& keep);
  CallOptions parse_options(nb::handle format, nb::handle scale_layout, nb::handle out_dtype, nb::handle backend) const;
  // `stream`: plan-time reads of the arrays wait for its work (the stream that wrote them).
  PlanPtr make_plan(const Prepared& p, bool capturing, cudaStream_t stream);
  // Enqueues `plan`, pinning it when the stream is being captured.
  void run(const PlanPtr& plan, cudaStream_t stream, bool capturing);
  cudaStream_t resolve_stream(nb::handle stream, Framework f, int device);
  static bool is_capturing(cudaStream_t stream);

  void set_default_backend(Backend b) { default_backend_ = b; }
  Backend default_backend() const { return default_backend_; }
  CacheStats stats() const;
  void clear_cache(bool pinned);
  void set_capacity(std::size_t n);
  void set_max_bytes(std::size_t bytes);

  TensorReader& reader() { return reader_; }

  // Default bound on the device memory the cached plans hold (set_plan_cache_max_bytes).
  static constexpr std::size_t kDefaultMaxBytes = std::size_t{1} << 30;

 private:
  Binding();
  // `extra`: signature words of the call's kind (empty for grouped_gemm).
  bool try_memo(const CallOptions& o, nb::handle alpha, const std::vector<PyObject*>& objects,
                nb::handle stream, std::vector<std::uint64_t>& signature, std::uint64_t& hash, bool& memoizable,
                const std::vector<std::uint64_t>& extra = {});
  void remember(std::vector<std::uint64_t> signature, std::uint64_t hash, const std::vector<PyObject*>& objects,
                const std::vector<TensorView>& views, const PlanPtr& plan, int device, bool capturing);
  void run_host(const Prepared& p, int threads);
  PlanPtr find_or_build(const Prepared& p, bool capturing, cudaStream_t stream);  // the plan cache's plan for `p`

  TensorReader reader_;
  // Guards plans_, memo_ and the counters against concurrent callers (Python threads; the GIL is
  // released while a plan is built or the host reference runs, and Python code run by the array
  // probes can switch threads at any point). Held only around the C++ list operations, never
  // across a call into Python or anything that waits: a thread holding it never waits for the
  // GIL, so it cannot deadlock against it (with a GIL it is not even contended; without one it
  // is what makes the caches safe). Entries it evicts are destroyed after it is released, since
  // destroying them drops Python references and frees device memory.
  mutable std::mutex mutex_;
  PlanCache plans_;
  CallMemo memo_;
  Backend default_backend_ = Backend::automatic;
  std::uint64_t hits_ = 0, misses_ = 0, memo_hits_ = 0;  // memo_hits_: both memos'
  struct ViewsMemo {  // replay_views' memo: the last grouped_gemm_views call and its plan
    GroupedViewsCall call;
    Backend backend = Backend::automatic;  // as resolved for `call` (its "" is the default then)
    std::weak_ptr<const Plan> plan;
  } views_memo_;
};

// Runs `build` (plan set-up: allocations, copies) with the GIL released. Inside a stream capture
// that set-up is only legal in relaxed capture mode (it is not part of the graph, only the later
// run() is), so the thread's mode is switched for the call and restored, also on an exception.
template <class F>
auto build_outside_capture(bool capturing, F&& build) {
  nb::gil_scoped_release release;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (capturing) cudaThreadExchangeStreamCaptureMode(&mode);
  try {
    auto plan = build();
    if (capturing) cudaThreadExchangeStreamCaptureMode(&mode);
    return plan;
  } catch (...) {
    if (capturing) cudaThreadExchangeStreamCaptureMode(&mode);
    throw;
  }
}

// Options parsing shared with the module (ValueError on unknown names).
Format parse_format(nb::handle h);
ScaleLayout parse_layout(nb::handle h);
OutType parse_out(nb::handle h);
Backend parse_backend(nb::handle h, Backend fallback);
MoeActivation parse_moe_activation(nb::handle h);  // 'fp4' (also 'nvfp4' / 'mxfp4') or 'bf16'
MoeLayout parse_moe_layout(nb::handle h);          // 'contiguous' or 'masked'

// fp4gemm.GroupedGemm: a plan bound to its arrays, run with little host work. The plan points
// into the arrays' memory, so the arrays and, for torch tensors, their storages are kept alive
// (a storage outlives a tensor's set_()/.data = ...); and run() checks that every torch tensor
// still has the data_ptr(), shape, strides and dtype it was built with, so that it never writes
// into memory the tensor has let go of, nor in a layout it no longer has.
class BoundGemm {
 public:
  BoundGemm(nb::handle a, nb::handle b, nb::handle sfa, nb::handle sfb, nb::handle c, nb::handle alpha,
            nb::handle format, nb::handle scale_layout, nb::handle out_dtype, nb::handle backend);
  void run(nb::handle stream) const;
  std::string kernel_name() const { return plan_->kernel_name(); }
  std::string describe() const { return plan_->describe(); }
  double flops() const { return plan_->flops(); }
  double min_bytes() const { return plan_->min_bytes(); }
  int num_groups() const { return plan_->num_groups(); }
  nb::object outputs() const { return c_; }

 private:
  struct Watched {         // a torch tensor the plan points into
    nb::handle obj;        // borrowed from refs_
    std::uint32_t index;   // in CallArgs::objects order; num_objects_ for alpha
  };
  PlanPtr plan_;
  nb::list refs_;      // the arrays the plan points into
  nb::list storages_;  // the torch storages behind them
  std::vector<Watched> watched_;
  TorchStates states_;  // of watched_, at build time
  std::size_t num_objects_ = 0;
  nb::object c_;
  Framework framework_ = Framework::other;
  int device_ = -1;
};

}  // namespace fp4gemm::python
