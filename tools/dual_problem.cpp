// The dual GEMM problem shared by `fp4gemm dual` and `fp4gemm bench --suite dual`.
#include "dual_problem.hpp"

#include "peers.hpp"

namespace fp4gemm::cli {

namespace {

DataSettings up_settings(DataSettings s) {
  s.seed = s.seed * 2654435761u + 97;  // B2: its own data
  return s;
}

}  // namespace

void check_dual_backend(Backend backend) {
  if (backend == Backend::reference)
    throw Error("--backend", -1,
                "the CLI's dual GEMM runs on the fast kernel only (--check compares it with the host reference; the "
                "library's Backend::reference runs the GPU reference's dual GEMM)");
}

DualProblem::DualProblem(const ProblemShape& shape, const DataSettings& data, bool full_values, Epilogue epilogue,
                         const Tuning& tuning, cudaStream_t stream)
    : gate_(shape, data), up_(shape, up_settings(data)) {
  if (full_values) {  // realistic data (tensor-core power depends on it): random nibbles, normal-range scales
    std::uint64_t seed = data.seed;
    for (const ProblemData* p : {&gate_, &up_})
      for (const GroupBuffers& g : p->groups()) {
        for (const DeviceBuffer* b : {&g.a, &g.b})
          if (b->bytes() > 0) fill_bytes_random(b->get(), b->padded_bytes(), ++seed, stream);
        for (const DeviceBuffer* b : {&g.sfa, &g.sfb})
          if (b->bytes() > 0) fill_scales_random(b->get(), b->padded_bytes(), data.format, ++seed, stream);
      }
    CLI_CUDA_CHECK(cudaStreamSynchronize(stream), "data");
  }
  std::vector<GroupDesc> descs = gate_.descs(), gate_only = gate_.descs(), up_only = up_.descs();
  for (std::size_t g = 0; g < descs.size(); ++g) {
    descs[g].b_up = up_.groups()[g].b.get();
    descs[g].sfb_up = up_.groups()[g].sfb.get();
    up_only[g].a = descs[g].a, up_only[g].sfa = descs[g].sfa;  // the unfused path: both GEMMs read the same A
  }
  Options opts;
  opts.format = data.format, opts.scale_layout = data.layout, opts.out_type = data.out;
  opts.backend = Backend::fast, opts.tuning = tuning, opts.epilogue = epilogue;
  fused_.emplace(descs, opts);
  Options plain = opts;
  plain.epilogue = Epilogue::none;
  plain_gate_.emplace(gate_only, plain);  // (outputs: gate's c and up's c)
  plain_up_.emplace(up_only, plain);
  for (const GroupBuffers& g : gate_.groups())
    unfused_out_.emplace_back(g.m > 0 ? DeviceBuffer(g.c.bytes(), "data (unfused output)") : DeviceBuffer());
}

void DualProblem::run_plain(cudaStream_t stream) const {
  plain_gate_->run(stream);
  plain_up_->run(stream);
}

void DualProblem::run_unfused(cudaStream_t stream) const {
  run_plain(stream);
  for (std::size_t g = 0; g < gate_.groups().size(); ++g) {
    const GroupBuffers& x = gate_.groups()[g];
    glu_elementwise(x.c.get(), up_.groups()[g].c.get(), unfused_out_[g].get(), x.ldc, x.m, x.n, gate_.settings().out,
                    fused_->options(), stream);
  }
}

}  // namespace fp4gemm::cli
