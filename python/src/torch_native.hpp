// C++ kernels for torch.ops.fp4gemm ops, registered through torch's stable C ABI (the functions
// libtorch exports for AOTInductor and stable extensions: torch_library_impl, aoti_torch_get_*,
// aoti_torch_empty_strided, ...). The symbols are looked up at run time in the libtorch that the
// process has already loaded, so the extension builds without torch and loads without it; where a
// symbol is missing (torch older than 2.10) nothing is registered and the ops keep their Python
// kernels. Why: torch's dispatcher calling a Python kernel costs ~5.5 us per call with 16 arguments,
// more than the whole layer's enqueue; measured on an H200 host, the native kernel takes a
// torch.ops.fp4gemm.fused_experts call from 15.2 to 9.1 us of host time.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fp4gemm::python {

class FusedExpertsCache;

// Registers the CUDA kernels of fp4gemm::fused_experts and fp4gemm::moe_grouped_gemm (the ops must
// already be defined, and so must fp4gemm::_fused_experts_python / _moe_grouped_gemm_python: the
// same schemas with the Python kernels, which take what the native kernels leave). `lib_dir`:
// torch's lib/ folder. Returns each op's status: "" registered, else why not (that op keeps its
// Python kernel). A second call only points the kernels at `cache`.
std::vector<std::pair<std::string, std::string>> register_torch_native(const std::string& lib_dir,
                                                                       FusedExpertsCache* cache);

// What register_torch_native returned ("not attempted" before it ran).
std::vector<std::pair<std::string, std::string>> torch_native_status();

// Calls of the native kernels so far: (hot path, forwarded to the Python kernel).
std::pair<std::uint64_t, std::uint64_t> torch_native_counts();

// The Python kernels of the private ops, called from a native kernel (torch_native_forwarding()
// true on this thread), report an exception here instead of raising it through torch's C shim
// (which would log it and return only an error code); the native kernel then raises it as a
// RuntimeError with this text. Called directly, they raise as usual.
void set_torch_native_error(const std::string& message);
bool torch_native_forwarding();

// Called by ~FusedExpertsCache: the native kernel then takes the Python path on every call.
void forget_torch_native_cache(const FusedExpertsCache* cache);

}  // namespace fp4gemm::python
