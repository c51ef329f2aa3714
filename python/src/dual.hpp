// fp4gemm.DualGemm: the pointer-array dual GEMM (C = act(alpha A B1^T, alpha_up A B2^T) per group,
// SwiGLU / gpt-oss's swigluoai), bound once to its arrays like GroupedGemm.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <string>
#include <vector>

#include "fp4gemm/fp4gemm.hpp"
#include "grouped.hpp"

namespace fp4gemm::python {

// The arrays of one dual-GEMM call: the gate product's five lists (a, b1, sfa, sfb1, c) and the up
// product's (a, b2, sfa, sfb2, c), each checked like a grouped GEMM's, with errors naming this
// call's arguments. `objects` / `views`: the gate's per-group objects, then (b2, sfb2) per group.
struct DualCall {
  CallArgs gate, up;
  std::vector<PyObject*> objects;
  Keepalive keep;
  Prepared pg, pu;
  std::vector<GroupDesc> groups;  // the gate's, with the up weights paired in (after prepare)
  std::vector<TensorView> views;

  DualCall(Binding& bind, nb::handle a, nb::handle b1, nb::handle b2, nb::handle sfa, nb::handle sfb1, nb::handle sfb2,
           nb::handle c);
  // Reads and validates every array (the views point into them: this object must outlive their use).
  void prepare(Binding& bind, const CallOptions& options, nb::handle alpha, nb::handle alpha_up);
  Options library_options(const CallOptions& options, Epilogue epilogue, float swiglu_alpha, float swiglu_limit,
                          bool rescale_each_run) const;
};

// 'silu' / 'swigluoai' (an Error naming `activation` otherwise).
Epilogue dual_activation(const std::string& activation);

class DualGemmObject {
 public:
  DualGemmObject(nb::handle a, nb::handle b1, nb::handle b2, nb::handle sfa, nb::handle sfb1, nb::handle sfb2,
                 nb::handle c, nb::handle alpha, nb::handle alpha_up, nb::handle format, nb::handle scale_layout,
                 nb::handle out_dtype, const std::string& activation, float swiglu_alpha, float swiglu_limit,
                 bool rescale_each_run);
  // CUDA arrays: enqueue on `stream`; host arrays: the CPU reference now (the kernel's FP32
  // epilogue, reference::moe_gemm's glu_fp32).
  void run(nb::handle stream, int threads) const;
  std::string describe() const;
  double flops() const;
  int num_groups() const { return static_cast<int>(groups_.size()); }
  nb::object outputs() const { return c_; }

 private:
  Options options_;
  std::vector<GroupDesc> groups_;
  bool cuda_ = false;
  int device_ = -1;
  Framework framework_ = Framework::other;
  std::shared_ptr<const Plan> plan_;
  nb::list refs_, storages_;
  struct Watched {
    nb::handle obj;
    std::string name;
  };
  std::vector<Watched> watched_;
  TorchStates states_;
  // torch weight scales the plan pairs into its own copy at build time (not with rescale_each_run)
  CopiedArrays copied_;
  std::vector<std::string> copied_names_;
  nb::object c_;
};

}  // namespace fp4gemm::python
