// torch.ops.fp4gemm.fused_experts' and moe_grouped_gemm's CUDA kernels in C++, through torch's
// stable C ABI (see the header).
//
// Calling convention (torch_library_impl, conversions of torch 2.10): the kernel receives the op's
// arguments as 64-bit StableIValues and owns them -- a Tensor is a new AtenTensorHandle (an
// at::Tensor* to release with aoti_torch_delete_tensor_object), an optional is 0 for None or a
// heap StableIValue* holding the value, a str a StringHandle (torch_delete_string), a float the
// double's bits, a ScalarType its code. It leaves the returns in the first slots (a Tensor: a
// handle torch takes over).
//
// fused_experts: the hot path finds the layer planned for these weights in fp4gemm.moe's
// FusedExpertsCache (the same weight tensors -- TensorImpl identity, as the Python path compares
// the objects -- at the same data_ptr / shape / strides / dtype, and the options),
// allocates the output with aoti_torch_empty_strided and enqueues the layer on torch's current
// stream. Everything else -- a miss, growth past the plan's max_tokens, anything the checks would
// reject -- forwards the untouched argument stack to fp4gemm::_fused_experts_python (the same
// schema, the Python kernel), which plans, fills the cache, runs, or reports the error that the
// native kernel then raises.
//
// moe_grouped_gemm: the whole call in C++ (the MoE binding's checks and plan cache, as
// fp4gemm.moe.grouped_gemm runs them); linear weight scales and the arguments it does not take go
// to fp4gemm::_moe_grouped_gemm_python.
//
// Errors reach Python as RuntimeError("ArgumentError: fp4gemm: <argument>: ...") (torch turns C++
// exceptions into RuntimeError; the class fp4gemm would raise leads the text).
#include "torch_native.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <nanobind/nanobind.h>

#include "checks.hpp"
#include "grouped.hpp"
#include "moe.hpp"
#include "moe_layer.hpp"
#include "tensor_view.hpp"

namespace fp4gemm::python {

namespace {

namespace nb = nanobind;

using StableIValue = std::uint64_t;
using AtenTensorHandle = void*;
using TorchLibraryHandle = void*;
using StringHandle = void*;
using ShimError = std::int32_t;  // AOTITorchError: 0 is success
using BoxedKernel = void (*)(StableIValue*, std::uint64_t, std::uint64_t);

// The conversions this file implements are those of torch 2.10 (strings as StringHandle).
constexpr std::uint64_t kStableVersion = (std::uint64_t{2} << 56) | (std::uint64_t{10} << 48);

struct Shim {
  ShimError (*library_init_impl)(const char*, const char*, const char*, std::uint32_t, TorchLibraryHandle*) = nullptr;
  ShimError (*library_impl)(TorchLibraryHandle, const char*, BoxedKernel, std::uint64_t) = nullptr;
  ShimError (*call_dispatcher)(const char*, const char*, StableIValue*, std::uint64_t) = nullptr;
  ShimError (*data_ptr)(AtenTensorHandle, void**) = nullptr;
  ShimError (*dim)(AtenTensorHandle, std::int64_t*) = nullptr;
  ShimError (*sizes)(AtenTensorHandle, std::int64_t**) = nullptr;
  ShimError (*strides)(AtenTensorHandle, std::int64_t**) = nullptr;
  ShimError (*dtype)(AtenTensorHandle, std::int32_t*) = nullptr;
  ShimError (*device_type)(AtenTensorHandle, std::int32_t*) = nullptr;
  ShimError (*device_index)(AtenTensorHandle, std::int32_t*) = nullptr;
  ShimError (*delete_tensor)(AtenTensorHandle) = nullptr;
  ShimError (*new_tensor_handle)(AtenTensorHandle, AtenTensorHandle*) = nullptr;
  ShimError (*list_size)(void*, std::size_t*) = nullptr;
  ShimError (*list_get_item)(void*, std::size_t, StableIValue*) = nullptr;
  ShimError (*delete_list)(void*) = nullptr;
  ShimError (*new_list)(std::size_t, void**) = nullptr;
  ShimError (*list_push_back)(void*, StableIValue) = nullptr;
  bool (*grad_mode_is_enabled)() = nullptr;
  void (*grad_mode_set_enabled)(bool) = nullptr;
  ShimError (*storage_size)(AtenTensorHandle, std::int64_t*) = nullptr;    // bytes
  ShimError (*storage_offset)(AtenTensorHandle, std::int64_t*) = nullptr;  // elements
  ShimError (*empty_strided)(std::int64_t, const std::int64_t*, const std::int64_t*, std::int32_t, std::int32_t,
                             std::int32_t, AtenTensorHandle*) = nullptr;
  ShimError (*string_length)(StringHandle, std::size_t*) = nullptr;
  ShimError (*string_c_str)(StringHandle, const char**) = nullptr;
  ShimError (*delete_string)(StringHandle) = nullptr;
  ShimError (*cuda_stream)(std::int32_t, void**) = nullptr;
  // c10::ScalarType codes (from libtorch's aoti_torch_dtype_* where exported) and device types
  std::int32_t u8 = 0, i8 = 1, i16 = 2, i32 = 3, i64 = 4, f16 = 5, f32 = 6, bf16 = 15, e4m3 = 24, u16 = 27,
               e8m0 = 44, f4x2 = 45;
  std::int32_t cpu = 0, cuda = 1;
};

Shim g_shim;
TorchLibraryHandle g_library = nullptr;  // kept for the process's life: its destructor would deregister
FusedExpertsCache* g_cache = nullptr;     // read and written under the GIL
// Per op: "" registered, else why not.
std::pair<const char*, std::string> g_status[] = {{"fused_experts", "not attempted"},
                                                  {"moe_grouped_gemm", "not attempted"},
                                                  {"moe_grouped_gemm_out", "not attempted"},
                                                  {"grouped_gemm", "not attempted"},
                                                  {"grouped_gemm_out", "not attempted"}};
thread_local std::string t_error;       // set by the Python path (set_torch_native_error)
thread_local bool t_forwarding = false;  // a native kernel is calling its Python kernel
std::atomic<std::uint64_t> g_hot{0}, g_python{0};  // calls by path (tests: the hot path runs)

template <class F>
bool resolve(void* lib, const char* name, F& slot) {
  slot = reinterpret_cast<F>(dlsym(lib, name));
  return slot != nullptr;
}

void* open_loaded(const std::string& dir, const char* name) {
  // Only a library the process has already loaded (import torch): never a second copy.
  if (void* h = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) return h;
  return dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_NOLOAD);
}

DType dtype_of(std::int32_t code) {
  const Shim& s = g_shim;
  if (code == s.u8 || code == s.i8) return DType::byte;
  if (code == s.f4x2) return DType::fp4x2;
  if (code == s.e4m3) return DType::e4m3;
  if (code == s.e8m0) return DType::ue8m0;
  if (code == s.f16) return DType::f16;
  if (code == s.bf16) return DType::bf16;
  if (code == s.f32) return DType::f32;
  if (code == s.i16 || code == s.u16) return DType::raw16;
  if (code == s.i32) return DType::i32;
  if (code == s.i64) return DType::i64;
  return DType::other;
}

// A tensor as TensorReader reads a torch tensor, storage bounds included; false for what the hot
// paths do not take (more than kMaxDims dimensions, devices other than CPU / CUDA).
bool view_of(AtenTensorHandle h, TensorView& v) {
  const Shim& s = g_shim;
  std::int64_t nd = 0, *sz = nullptr, *st = nullptr;
  std::int32_t code = 0, type = 0, index = 0;
  void* ptr = nullptr;
  if (s.dim(h, &nd) != 0 || nd < 0 || nd > kMaxDims || s.sizes(h, &sz) != 0 || s.strides(h, &st) != 0 ||
      s.dtype(h, &code) != 0 || s.device_type(h, &type) != 0 || s.device_index(h, &index) != 0 ||
      s.data_ptr(h, &ptr) != 0)
    return false;
  if (type != s.cuda && type != s.cpu) return false;
  v = TensorView{};
  v.framework = Framework::torch;
  v.ndim = static_cast<int>(nd);
  for (int i = 0; i < v.ndim; ++i) v.shape[i] = sz[i], v.strides[i] = st[i];
  v.dtype = dtype_of(code);
  v.itemsize = torch_itemsize(v.dtype);
  v.cuda = type == s.cuda;
  v.device = v.cuda ? index : -1;
  v.ptr = reinterpret_cast<std::uintptr_t>(ptr);
  // the storage's bytes, as TensorReader reads them (untyped_storage().data_ptr(), nbytes())
  std::int64_t bytes = 0, offset = 0;
  if (v.dtype != DType::other && s.storage_size != nullptr && s.storage_offset != nullptr &&
      s.storage_size(h, &bytes) == 0 && s.storage_offset(h, &offset) == 0) {
    v.has_alloc = true;
    v.alloc_begin = v.ptr - static_cast<std::uintptr_t>(offset * v.itemsize);
    v.alloc_end = v.alloc_begin + static_cast<std::uintptr_t>(bytes);
  }
  return true;
}

std::string_view text_of(StableIValue v) {
  const char* p = nullptr;
  std::size_t n = 0;
  if (g_shim.string_c_str(reinterpret_cast<StringHandle>(v), &p) != 0 ||
      g_shim.string_length(reinterpret_cast<StringHandle>(v), &n) != 0)
    return {};
  return {p, n};
}

double double_of(StableIValue v) {
  double d;
  std::memcpy(&d, &v, sizeof d);
  return d;
}

AtenTensorHandle optional_tensor(StableIValue v) {
  return v == 0 ? nullptr : reinterpret_cast<AtenTensorHandle>(*reinterpret_cast<StableIValue*>(v));
}

struct Gil {
  PyGILState_STATE state = PyGILState_Ensure();
  ~Gil() { PyGILState_Release(state); }
};

// Releases the arguments a kernel took over; `kinds` spells the schema, one letter per argument:
// T tensor, O optional tensor, F optional float, S str, L list of tensors, Q optional list of
// floats, and D / d for values held in the slot itself (ScalarType, float).
void release_inputs(StableIValue* stack, const char* kinds) {
  const Shim& s = g_shim;
  for (int i = 0; kinds[i] != 0; ++i) {
    const StableIValue v = stack[i];
    switch (kinds[i]) {
      case 'T': s.delete_tensor(reinterpret_cast<AtenTensorHandle>(v)); break;
      case 'O':
        if (v != 0) {
          StableIValue* box = reinterpret_cast<StableIValue*>(v);
          s.delete_tensor(reinterpret_cast<AtenTensorHandle>(*box));
          delete box;
        }
        break;
      case 'F':
        if (v != 0) delete reinterpret_cast<StableIValue*>(v);
        break;
      case 'S': s.delete_string(reinterpret_cast<StringHandle>(v)); break;
      case 'L': {  // a list of tensors
        std::size_t n = 0;
        if (s.list_size(reinterpret_cast<void*>(v), &n) == 0)
          for (std::size_t j = 0; j < n; ++j) {
            StableIValue item = 0;
            if (s.list_get_item(reinterpret_cast<void*>(v), j, &item) == 0)
              s.delete_tensor(reinterpret_cast<AtenTensorHandle>(item));
          }
        s.delete_list(reinterpret_cast<void*>(v));
        break;
      }
      case 'Q':  // an optional list of floats
        if (v != 0) {
          StableIValue* box = reinterpret_cast<StableIValue*>(v);
          s.delete_list(reinterpret_cast<void*>(*box));
          delete box;
        }
        break;
      default: break;
    }
  }
}

// The op's Python kernel (`python_op`, the same schema), handed the untouched stack: it takes the
// arguments over and leaves its result (of kind `out`: 'T' tensor, 'L' list of tensors, 0 none)
// in stack[0]; an exception it reported is raised here.
void forward_to_python(const char* python_op, StableIValue* stack, char out) {
  g_python.fetch_add(1, std::memory_order_relaxed);
  t_error.clear();
  struct Forwarding {
    Forwarding() { t_forwarding = true; }
    ~Forwarding() { t_forwarding = false; }
  };
  ShimError failed;
  {
    const Forwarding scope;
    failed = g_shim.call_dispatcher(python_op, "", stack, kStableVersion);
  }
  if (failed != 0)
    throw std::runtime_error(std::string("fp4gemm: ") + python_op + " failed (torch logged why)");
  if (!t_error.empty()) {
    const char kind[2] = {out, 0};
    release_inputs(stack, kind);  // the placeholder result
    std::string message;
    message.swap(t_error);
    throw std::runtime_error(message);
  }
}

// fp4gemm::Error as the Python path would name it (the exception's class, then its text).
[[noreturn]] void rethrow_as_python(const Error& e) {
  throw std::runtime_error(std::string(is_runtime_failure(e) ? "DeviceError: " : "ArgumentError: ") + e.what());
}

// Ends a hot path that allocated `out`: runs `launch`; on success releases the inputs and leaves
// `out` in stack[0] (true). An fp4gemm::Error naming an argument returns false where
// `argument_errors_to_python` (the checks come before anything is enqueued: the Python path then
// names it), else is raised as the Python path would raise it; anything else is raised. `out` is
// freed on every failure.
template <typename Launch>
bool finish_hot(StableIValue* stack, const char* kinds, AtenTensorHandle out, bool argument_errors_to_python,
                Launch&& launch) {
  const Shim& s = g_shim;
  try {
    launch();
  } catch (const Error& e) {
    s.delete_tensor(out);
    if (argument_errors_to_python && !is_runtime_failure(e)) return false;
    release_inputs(stack, kinds);
    rethrow_as_python(e);
  } catch (...) {
    s.delete_tensor(out);
    release_inputs(stack, kinds);
    throw;
  }
  release_inputs(stack, kinds);
  stack[0] = reinterpret_cast<StableIValue>(out);
  return true;
}

// A native kernel: `Hot` runs the call in C++ where it can (true: inputs released, the output if
// the schema has one -- `kOut` 'T' a tensor, 'L' a list of tensors, 0 none -- in stack[0]);
// otherwise the op's Python kernel `kPythonOp` gets the untouched stack.
template <bool (*Hot)(StableIValue*), const char* kKinds, const char* kPythonOp, char kOut = 'T'>
void native_kernel(StableIValue* stack, std::uint64_t num_args, std::uint64_t num_outputs) {
  if (num_args != std::strlen(kKinds) || num_outputs != (kOut != 0 ? 1u : 0u))
    throw std::runtime_error(std::string("fp4gemm: ") + kPythonOp +
                             ": the native kernel was registered for another schema");
  if (Hot(stack)) {
    g_hot.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  forward_to_python(kPythonOp, stack, kOut);
}

// ---- fp4gemm::fused_experts -------------------------------------------------------------------------

// (hidden_states, w13, w13_scale, w2, w2_scale, topk_weights, topk_ids, w13_alpha?, w13_alpha_up?,
// w2_alpha?, activation, act_format, gate_up, scale_layout, a1_scale, a2_scale, w13_bias?, w2_bias?, weight_layout)
// -> Tensor
constexpr char kFusedExpertsKinds[] = "TTTTTTTOOOSSSSddOOS";
constexpr char kFusedExpertsPython[] = "fp4gemm::_fused_experts_python";

// The hot path; true when it ran and left the output in stack[0] (the inputs released).
bool fused_experts_hot(StableIValue* stack) {
  TensorView hidden, ids, wts, weights[FusedExpertsCache::kWeights];
  const AtenTensorHandle weight_handles[FusedExpertsCache::kWeights] = {
      reinterpret_cast<AtenTensorHandle>(stack[1]), reinterpret_cast<AtenTensorHandle>(stack[2]),
      reinterpret_cast<AtenTensorHandle>(stack[3]), reinterpret_cast<AtenTensorHandle>(stack[4]),
      optional_tensor(stack[7]), optional_tensor(stack[8]), optional_tensor(stack[9]),
      optional_tensor(stack[16]), optional_tensor(stack[17])};
  if (!view_of(reinterpret_cast<AtenTensorHandle>(stack[0]), hidden) ||
      !view_of(reinterpret_cast<AtenTensorHandle>(stack[5]), wts) ||
      !view_of(reinterpret_cast<AtenTensorHandle>(stack[6]), ids))
    return false;
  for (int i = 0; i < FusedExpertsCache::kWeights; ++i)
    if (weight_handles[i] != nullptr && !view_of(weight_handles[i], weights[i])) return false;
  // what the Python path's output would be: torch.empty_like(hidden_states) of a valid [T, H] bf16
  if (!hidden.cuda || hidden.ndim != 2 || hidden.dtype != DType::bf16 || ids.ndim != 2) return false;
  // The TensorImpl behind each weight: an AtenTensorHandle is an at::Tensor*, whose one member is
  // its intrusive pointer (torch's own shim casts the handle so). A torch without that layout only
  // never matches an entry here (the Python path then runs every call).
  std::uintptr_t impls[FusedExpertsCache::kWeights] = {};
  for (int i = 0; i < FusedExpertsCache::kWeights; ++i)
    if (weight_handles[i] != nullptr) std::memcpy(&impls[i], weight_handles[i], sizeof impls[i]);
  FusedExpertsCache::NativeKey key;
  key.weights = weights;
  key.impls = impls;
  key.activation = text_of(stack[10]), key.act_format = text_of(stack[11]);
  key.gate_up = text_of(stack[12]), key.scale_layout = text_of(stack[13]), key.weight_layout = text_of(stack[18]);
  key.a1 = double_of(stack[14]), key.a2 = double_of(stack[15]);
  key.tokens = hidden.shape[0], key.topk = ids.shape[1];
  const Shim& s = g_shim;
  Gil gil;  // the cache is shared with the Python path
  FusedExpertsCache* cache = g_cache;
  if (cache == nullptr) return false;
  nb::object keep;
  const MoeLayerObject* layer = cache->find_native(key, keep);
  if (layer == nullptr || layer->device() != hidden.device) return false;
  void* stream = nullptr;
  if (s.cuda_stream(hidden.device, &stream) != 0) return false;
  const std::int64_t size[2] = {hidden.shape[0], hidden.shape[1]},
                     stride[2] = {std::max<std::int64_t>(hidden.shape[1], 1), 1};
  AtenTensorHandle out = nullptr;
  if (s.empty_strided(2, size, stride, s.bf16, s.cuda, hidden.device, &out) != 0) return false;
  return finish_hot(stack, kFusedExpertsKinds, out, /*argument_errors_to_python=*/true, [&] {
    TensorView y;
    if (!view_of(out, y)) throw std::runtime_error("fp4gemm: fused_experts: cannot read its output");
    layer->run_on_stream(hidden, ids, wts, y, reinterpret_cast<cudaStream_t>(stream));
  });
}

// ---- fp4gemm::moe_grouped_gemm(_out) ------------------------------------------------------------

// Where the two MoE GEMM ops keep the arguments they share.
struct MoeSlots {
  int a, a_scales, w, w_scales, offsets, gather, alpha, alpha_tensor, format, scale_layout;
};

// The name fp4gemm's option parser takes for an output type; null for the types it does not take.
const char* out_dtype_name(DType t) {
  return t == DType::bf16 ? "bfloat16" : t == DType::f16 ? "float16" : t == DType::f32 ? "float32" : nullptr;
}

// Reads a MoE GEMM call's shared arguments (all but `out`); false for what the hot paths leave to
// the Python kernels -- linear scales (a plan keyed on torch's _version of them, which the C ABI
// cannot read), alpha and alpha_tensor both given, host weights (the placement errors are the
// Python path's), arrays it cannot read.
bool read_moe_call(const StableIValue* stack, const MoeSlots& k, MoeViewsCall& call) {
  TensorView alpha_view;
  MoeRunViews& v = call.views;
  const AtenTensorHandle h_as = optional_tensor(stack[k.a_scales]), h_g = optional_tensor(stack[k.gather]),
                         h_alpha = optional_tensor(stack[k.alpha_tensor]);
  if (!view_of(reinterpret_cast<AtenTensorHandle>(stack[k.a]), v.a) ||
      !view_of(reinterpret_cast<AtenTensorHandle>(stack[k.w]), call.w) ||
      !view_of(reinterpret_cast<AtenTensorHandle>(stack[k.w_scales]), call.w_scales) ||
      !view_of(reinterpret_cast<AtenTensorHandle>(stack[k.offsets]), v.offsets) ||
      (h_as && !view_of(h_as, v.a_scales)) || (h_g && !view_of(h_g, v.gather)) ||
      (h_alpha && !view_of(h_alpha, alpha_view)))
    return false;
  v.has_a_scales = h_as != nullptr, v.has_offsets = true, v.has_gather = h_g != nullptr;
  call.format = text_of(stack[k.format]);  // "": follow a's dtype
  call.scale_layout = text_of(stack[k.scale_layout]);
  const StableIValue alpha = stack[k.alpha];
  if (call.scale_layout != "blocked" || (alpha != 0 && h_alpha != nullptr) || !v.a.cuda || !call.w.cuda ||
      v.a.ndim < 1 || call.w.ndim != 3 || (h_g && v.gather.ndim != 1))
    return false;
  if (alpha != 0) {
    call.alpha.given = true;
    call.alpha.scalar = static_cast<float>(double_of(*reinterpret_cast<const StableIValue*>(alpha)));
  } else if (h_alpha != nullptr) {
    call.alpha.given = call.alpha.is_array = true;
    call.alpha.view = alpha_view;
  }
  return true;
}

// Runs a call read by read_moe_call / read_grouped_call (with its output) on `stream` through
// `binding` (MoeBinding / Binding): from the memo of the last call where it has the same arrays
// and options (no GIL needed), else through the binding's checks and plan cache.
template <class Binding_, class Call>
void run_views_call(Binding_& binding, const Call& call, void* stream) {
  const cudaStream_t q = reinterpret_cast<cudaStream_t>(stream);
  if (binding.replay_views(call, q)) return;
  Gil gil;  // the checks build Python strings; plan building releases and retakes the GIL
  binding.grouped_gemm_views(call, q);
}

// (a, a_scales?, w, w_scales, expert_offsets, gather_index?, alpha: float?, alpha_tensor?, format,
// scale_layout, out_dtype) -> Tensor
constexpr char kMoeGroupedGemmKinds[] = "TOTTTOFOSSD";
constexpr char kMoeGroupedGemmPython[] = "fp4gemm::_moe_grouped_gemm_python";
constexpr MoeSlots kMoeGroupedGemmSlots{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};

// The whole call in C++ (the MoE GEMM binding's checks and plan cache, fp4gemm.moe.grouped_gemm's
// path) where the Python kernel would only allocate and call it: false for what read_moe_call
// leaves to that kernel and out dtypes it does not take.
bool moe_grouped_gemm_hot(StableIValue* stack) {
  const Shim& s = g_shim;
  MoeViewsCall call;
  if (!read_moe_call(stack, kMoeGroupedGemmSlots, call)) return false;
  const std::int32_t out_code = static_cast<std::int32_t>(stack[10] & 0xffffffffu);
  const char* out_name = out_dtype_name(dtype_of(out_code));
  if (out_name == nullptr) return false;
  call.out_dtype = out_name;
  const MoeRunViews& v = call.views;
  // the Python kernel's output: torch.empty((rows, N), dtype=out_dtype, device=a.device)
  const std::int64_t size[2] = {v.has_gather ? v.gather.shape[0] : v.a.shape[0], call.w.shape[1]},
                     stride[2] = {std::max<std::int64_t>(call.w.shape[1], 1), 1};
  void* stream = nullptr;
  if (s.cuda_stream(v.a.device, &stream) != 0) return false;
  AtenTensorHandle out = nullptr;
  if (s.empty_strided(2, size, stride, out_code, s.cuda, v.a.device, &out) != 0) return false;
  return finish_hot(stack, kMoeGroupedGemmKinds, out, /*argument_errors_to_python=*/false, [&] {
    if (!view_of(out, call.views.out)) throw std::runtime_error("fp4gemm: moe_grouped_gemm: cannot read its output");
    run_views_call(MoeBinding::get(), call, stream);
  });
}

// (a, a_scales?, w, w_scales, expert_offsets, gather_index?, out!, alpha: float?, alpha_tensor?,
// format, scale_layout) -> ()
constexpr char kMoeGroupedGemmOutKinds[] = "TOTTTOTFOSS";
constexpr char kMoeGroupedGemmOutPython[] = "fp4gemm::_moe_grouped_gemm_out_python";
constexpr MoeSlots kMoeGroupedGemmOutSlots{0, 1, 2, 3, 4, 5, 7, 8, 9, 10};

// Bumps the version counter of `t` as torch does for an in-place op: through
// aten::set_.source_Tensor(t, t), whose ADInplaceOrView kernel increments self's version (where
// torch tracks one: not for inference tensors) and whose backend kernel returns at once when the
// source is self. Under no_grad, as the Python kernel's torch.autograd.graph.increment_version: no
// autograd node is recorded and a leaf that requires grad is accepted (a device probe: with grad
// mode on, set_ gave a non-leaf out a NotImplemented grad_fn and refused a leaf). The C ABI has no
// call of its own for it.
bool bump_version(AtenTensorHandle t) {
  const Shim& s = g_shim;
  AtenTensorHandle self = nullptr, source = nullptr;
  if (s.new_tensor_handle(t, &self) != 0) return false;
  if (s.new_tensor_handle(t, &source) != 0) {
    s.delete_tensor(self);
    return false;
  }
  StableIValue stack[2] = {reinterpret_cast<StableIValue>(self), reinterpret_cast<StableIValue>(source)};
  const bool grad = s.grad_mode_is_enabled();
  if (grad) s.grad_mode_set_enabled(false);
  const ShimError failed = s.call_dispatcher("aten::set_", "source_Tensor", stack, kStableVersion);
  if (grad) s.grad_mode_set_enabled(true);
  if (failed != 0) return false;
  s.delete_tensor(reinterpret_cast<AtenTensorHandle>(stack[0]));  // set_ returns self
  return true;
}

// The whole call in C++, `out` given; its version counter bumped as the op's mutates_args says.
// False for what read_moe_call leaves to the Python kernel and out dtypes it does not take.
bool moe_grouped_gemm_out_hot(StableIValue* stack) {
  const Shim& s = g_shim;
  MoeViewsCall call;
  const AtenTensorHandle out = reinterpret_cast<AtenTensorHandle>(stack[6]);
  if (!read_moe_call(stack, kMoeGroupedGemmOutSlots, call) || !view_of(out, call.views.out)) return false;
  const char* out_name = out_dtype_name(call.views.out.dtype);
  if (out_name == nullptr) return false;
  call.out_dtype = out_name;
  void* stream = nullptr;
  if (s.cuda_stream(call.views.a.device, &stream) != 0) return false;
  try {
    run_views_call(MoeBinding::get(), call, stream);
  } catch (const Error& e) {
    release_inputs(stack, kMoeGroupedGemmOutKinds);
    rethrow_as_python(e);
  } catch (...) {
    release_inputs(stack, kMoeGroupedGemmOutKinds);
    throw;
  }
  const bool bumped = bump_version(out);
  release_inputs(stack, kMoeGroupedGemmOutKinds);
  if (!bumped)
    throw std::runtime_error(
        "fp4gemm: moe_grouped_gemm_out: out was written, but torch refused to bump its version counter "
        "(aten::set_; torch logged why)");
  return true;
}

// ---- fp4gemm::grouped_gemm(_out): the pointer-array grouped GEMM ---------------------------------

// Reads a pointer-array call's lists (a, b, sfa, sfb from slots 0-3; c from `c_slot` when given),
// alpha (a float list or a tensor) and options; false for what the hot paths leave to the Python
// kernels: lists of different lengths, alpha and alpha_tensor both given, arrays it cannot read.
bool read_grouped_call(const StableIValue* stack, int c_slot, int alpha_slot, int alpha_tensor_slot,
                       GroupedViewsCall& call) {
  const Shim& s = g_shim;
  std::size_t n = 0;
  if (s.list_size(reinterpret_cast<void*>(stack[0]), &n) != 0 || n > 4096) return false;
  const int lists = c_slot >= 0 ? kPerGroup : kPerGroup - 1;
  for (int i = 1; i < lists; ++i) {
    std::size_t m = 0;
    if (s.list_size(reinterpret_cast<void*>(stack[i == 4 ? c_slot : i]), &m) != 0 || m != n) return false;
  }
  call.groups = static_cast<int>(n);
  call.views.assign(n * kPerGroup, TensorView{});
  for (int i = 0; i < lists; ++i) {
    void* list = reinterpret_cast<void*>(stack[i == 4 ? c_slot : i]);
    for (std::size_t g = 0; g < n; ++g) {
      StableIValue item = 0;
      if (s.list_get_item(list, g, &item) != 0 ||
          !view_of(reinterpret_cast<AtenTensorHandle>(item), call.views[g * kPerGroup + i]))
        return false;
    }
  }
  const StableIValue alpha = stack[alpha_slot];
  const AtenTensorHandle h_alpha = optional_tensor(stack[alpha_tensor_slot]);
  if (alpha != 0 && h_alpha != nullptr) return false;
  if (alpha != 0) {
    void* list = reinterpret_cast<void*>(*reinterpret_cast<const StableIValue*>(alpha));
    std::size_t m = 0;
    if (s.list_size(list, &m) != 0) return false;
    call.alpha_values.resize(m);
    for (std::size_t g = 0; g < m; ++g) {
      StableIValue item = 0;
      if (s.list_get_item(list, g, &item) != 0) return false;
      call.alpha_values[g] = static_cast<float>(double_of(item));
    }
  } else if (h_alpha != nullptr) {
    call.alpha_is_array = true;
    if (!view_of(h_alpha, call.alpha_view)) return false;
  }
  return true;
}

// The device of a call's first array (its stream is the run's), or false for an empty call.
bool first_device(const GroupedViewsCall& call, int& device) {
  if (call.views.empty()) return false;
  device = call.views[0].cuda ? call.views[0].device : -1;
  return device >= 0;
}

// (a[], b[], sfa[], sfb[], alpha: float[]?, alpha_tensor?, format, scale_layout, out_dtype,
// backend) -> Tensor[]
constexpr char kGroupedGemmKinds[] = "LLLLQOSSDS";
constexpr char kGroupedGemmPython[] = "fp4gemm::_grouped_gemm_python";

// Allocates each group's C as the Python kernel does (torch.empty([M, N] or [M, N, 1] for 3-D
// a, out_dtype, a's device)) and runs the call; the list of C in stack[0]. False for what
// read_grouped_call leaves to the Python kernel, empty calls, out dtypes it does not take.
bool grouped_gemm_hot(StableIValue* stack) {
  const Shim& s = g_shim;
  GroupedViewsCall call;
  int device = -1;
  if (!read_grouped_call(stack, -1, 4, 5, call) || !first_device(call, device)) return false;
  const std::int32_t out_code = static_cast<std::int32_t>(stack[8] & 0xffffffffu);
  const char* out_name = out_dtype_name(dtype_of(out_code));
  if (out_name == nullptr) return false;
  call.format = text_of(stack[6]), call.scale_layout = text_of(stack[7]), call.out_dtype = out_name;
  call.backend = text_of(stack[9]);
  void* stream = nullptr;
  if (s.cuda_stream(device, &stream) != 0) return false;
  std::vector<AtenTensorHandle> outs;
  auto free_outs = [&] {
    for (AtenTensorHandle h : outs) s.delete_tensor(h);
  };
  for (int g = 0; g < call.groups; ++g) {
    const TensorView& a = call.views[static_cast<std::size_t>(g) * kPerGroup];
    const TensorView& b = call.views[static_cast<std::size_t>(g) * kPerGroup + 1];
    if (a.ndim < 1 || b.ndim < 1 || !a.cuda) {
      free_outs();
      return false;
    }
    const std::int64_t n = b.shape[0];
    const std::int64_t size[3] = {a.shape[0], n, 1}, stride[3] = {std::max<std::int64_t>(n, 1), 1, 1};
    AtenTensorHandle out = nullptr;
    if (s.empty_strided(a.ndim == 3 ? 3 : 2, size, stride, out_code, s.cuda, a.device, &out) != 0) {
      free_outs();
      return false;
    }
    outs.push_back(out);
    if (!view_of(out, call.views[static_cast<std::size_t>(g) * kPerGroup + 4])) {
      free_outs();
      return false;
    }
  }
  void* list = nullptr;
  try {
    run_views_call(Binding::get(), call, stream);
    if (s.new_list(outs.size(), &list) != 0) throw std::runtime_error("fp4gemm: grouped_gemm: cannot make its output list");
    for (AtenTensorHandle h : outs)
      if (s.list_push_back(list, reinterpret_cast<StableIValue>(h)) != 0)
        throw std::runtime_error("fp4gemm: grouped_gemm: cannot fill its output list");
  } catch (const Error& e) {
    if (list != nullptr) s.delete_list(list);
    free_outs();
    release_inputs(stack, kGroupedGemmKinds);
    rethrow_as_python(e);
  } catch (...) {
    if (list != nullptr) s.delete_list(list);
    free_outs();
    release_inputs(stack, kGroupedGemmKinds);
    throw;
  }
  release_inputs(stack, kGroupedGemmKinds);
  stack[0] = reinterpret_cast<StableIValue>(list);
  return true;
}

// (a[], b[], sfa[], sfb[], c![], alpha: float[]?, alpha_tensor?, format, scale_layout, backend) -> ()
constexpr char kGroupedGemmOutKinds[] = "LLLLLQOSSS";
constexpr char kGroupedGemmOutPython[] = "fp4gemm::_grouped_gemm_out_python";

// Runs the call into the given C; bumps each C's version counter as the op's mutates_args says.
// False for what read_grouped_call leaves to the Python kernel and empty calls.
bool grouped_gemm_out_hot(StableIValue* stack) {
  const Shim& s = g_shim;
  GroupedViewsCall call;
  int device = -1;
  if (!read_grouped_call(stack, 4, 5, 6, call) || !first_device(call, device)) return false;
  const char* out_name = out_dtype_name(call.views[4].dtype);  // the Python kernel: c[0].dtype
  if (out_name == nullptr) return false;
  call.format = text_of(stack[7]), call.scale_layout = text_of(stack[8]), call.out_dtype = out_name;
  call.backend = text_of(stack[9]);
  void* stream = nullptr;
  if (s.cuda_stream(device, &stream) != 0) return false;
  try {
    run_views_call(Binding::get(), call, stream);
  } catch (const Error& e) {
    release_inputs(stack, kGroupedGemmOutKinds);
    rethrow_as_python(e);
  } catch (...) {
    release_inputs(stack, kGroupedGemmOutKinds);
    throw;
  }
  bool bumped = true;
  void* c = reinterpret_cast<void*>(stack[4]);
  for (int g = 0; g < call.groups && bumped; ++g) {
    StableIValue item = 0;
    bumped = s.list_get_item(c, static_cast<std::size_t>(g), &item) == 0 &&
             bump_version(reinterpret_cast<AtenTensorHandle>(item));
  }
  release_inputs(stack, kGroupedGemmOutKinds);
  if (!bumped)
    throw std::runtime_error(
        "fp4gemm: grouped_gemm_out: c was written, but torch refused to bump its version counters "
        "(aten::set_; torch logged why)");
  return true;
}

// Resolves the shim and registers each op's kernel (g_status per op); "" when the library
// fragment exists, else why nothing was registered.
std::string open_library(const std::string& lib_dir) {
  void* cpu = open_loaded(lib_dir, "libtorch_cpu.so");
  void* gpu = open_loaded(lib_dir, "libtorch_cuda.so");
  if (cpu == nullptr) return "libtorch_cpu.so is not loaded";
  if (gpu == nullptr) return "libtorch_cuda.so is not loaded (a torch without CUDA)";
  Shim s;
  const char* missing = nullptr;
  auto need = [&](void* lib, const char* name, auto& slot) {
    if (missing == nullptr && !resolve(lib, name, slot)) missing = name;
  };
  need(cpu, "aoti_torch_library_init_impl", s.library_init_impl);
  need(cpu, "torch_library_impl", s.library_impl);
  need(cpu, "torch_call_dispatcher", s.call_dispatcher);
  need(cpu, "aoti_torch_get_data_ptr", s.data_ptr);
  need(cpu, "aoti_torch_get_dim", s.dim);
  need(cpu, "aoti_torch_get_sizes", s.sizes);
  need(cpu, "aoti_torch_get_strides", s.strides);
  need(cpu, "aoti_torch_get_dtype", s.dtype);
  need(cpu, "aoti_torch_get_device_type", s.device_type);
  need(cpu, "aoti_torch_get_device_index", s.device_index);
  need(cpu, "aoti_torch_delete_tensor_object", s.delete_tensor);
  need(cpu, "aoti_torch_new_tensor_handle", s.new_tensor_handle);
  need(cpu, "torch_list_size", s.list_size);
  need(cpu, "torch_list_get_item", s.list_get_item);
  need(cpu, "torch_delete_list", s.delete_list);
  need(cpu, "torch_new_list_reserve_size", s.new_list);
  need(cpu, "torch_list_push_back", s.list_push_back);
  need(cpu, "aoti_torch_grad_mode_is_enabled", s.grad_mode_is_enabled);
  need(cpu, "aoti_torch_grad_mode_set_enabled", s.grad_mode_set_enabled);
  need(cpu, "aoti_torch_get_storage_size", s.storage_size);
  need(cpu, "aoti_torch_get_storage_offset", s.storage_offset);
  need(cpu, "aoti_torch_empty_strided", s.empty_strided);
  need(cpu, "torch_string_length", s.string_length);
  need(cpu, "torch_string_c_str", s.string_c_str);
  need(cpu, "torch_delete_string", s.delete_string);
  need(gpu, "aoti_torch_get_current_cuda_stream", s.cuda_stream);
  if (missing != nullptr) return std::string("torch exports no ") + missing + " (torch older than 2.10)";
  // The codes as this libtorch defines them, where it says (else c10::ScalarType's values).
  const std::pair<const char*, std::int32_t*> codes[] = {
      {"aoti_torch_dtype_uint8", &s.u8},
      {"aoti_torch_dtype_int8", &s.i8},
      {"aoti_torch_dtype_int16", &s.i16},
      {"aoti_torch_dtype_int32", &s.i32},
      {"aoti_torch_dtype_int64", &s.i64},
      {"aoti_torch_dtype_float16", &s.f16},
      {"aoti_torch_dtype_float32", &s.f32},
      {"aoti_torch_dtype_bfloat16", &s.bf16},
      {"aoti_torch_dtype_float8_e4m3fn", &s.e4m3},
      {"aoti_torch_dtype_uint16", &s.u16},
      {"aoti_torch_dtype_float8_e8m0fnu", &s.e8m0},
      {"torch_dtype_float8_e8m0fnu", &s.e8m0},
      {"aoti_torch_dtype_float4_e2m1fn_x2", &s.f4x2},
      {"torch_dtype_float4_e2m1fn_x2", &s.f4x2},
      {"aoti_torch_device_type_cpu", &s.cpu},
      {"aoti_torch_device_type_cuda", &s.cuda}};
  for (const auto& [name, slot] : codes)
    if (auto f = reinterpret_cast<std::int32_t (*)()>(dlsym(cpu, name))) *slot = f();
  g_shim = s;
  TorchLibraryHandle lib = nullptr;
  if (s.library_init_impl("fp4gemm", "CUDA", __FILE__, __LINE__, &lib) != 0 || lib == nullptr)
    return "torch refused a library fragment for fp4gemm / CUDA (see its log)";
  g_library = lib;
  const std::pair<const char*, BoxedKernel> kernels[] = {
      {"fused_experts", &native_kernel<fused_experts_hot, kFusedExpertsKinds, kFusedExpertsPython>},
      {"moe_grouped_gemm", &native_kernel<moe_grouped_gemm_hot, kMoeGroupedGemmKinds, kMoeGroupedGemmPython>},
      {"moe_grouped_gemm_out",
       &native_kernel<moe_grouped_gemm_out_hot, kMoeGroupedGemmOutKinds, kMoeGroupedGemmOutPython, 0>},
      {"grouped_gemm", &native_kernel<grouped_gemm_hot, kGroupedGemmKinds, kGroupedGemmPython, 'L'>},
      {"grouped_gemm_out", &native_kernel<grouped_gemm_out_hot, kGroupedGemmOutKinds, kGroupedGemmOutPython, 0>}};
  for (const auto& [name, kernel] : kernels)
    for (auto& op : g_status)
      if (std::string_view(op.first) == name)
        op.second = s.library_impl(lib, name, kernel, kStableVersion) == 0
                        ? std::string()
                        : std::string("torch refused the ") + name + " kernel (see its log)";
  return "";
}

}  // namespace

std::vector<std::pair<std::string, std::string>> register_torch_native(const std::string& lib_dir,
                                                                       FusedExpertsCache* cache) {
  g_cache = cache;
  // The bindings the kernels run through, made now, under the GIL: Binding holds Python objects
  // (its TensorReader's), and the kernels' memo paths first reach it without the GIL.
  (void)Binding::get();
  (void)MoeBinding::get();
  if (g_library == nullptr) {
    const std::string why = open_library(lib_dir);
    if (!why.empty())
      for (auto& op : g_status) op.second = why;
  }
  return torch_native_status();
}

std::vector<std::pair<std::string, std::string>> torch_native_status() {
  std::vector<std::pair<std::string, std::string>> r;
  for (const auto& [name, status] : g_status) r.emplace_back(name, status);
  return r;
}

bool torch_native_forwarding() { return t_forwarding; }

std::pair<std::uint64_t, std::uint64_t> torch_native_counts() { return {g_hot.load(), g_python.load()}; }

void set_torch_native_error(const std::string& message) { t_error = message.empty() ? "fp4gemm: error" : message; }

void forget_torch_native_cache(const FusedExpertsCache* cache) {
  if (g_cache == cache) g_cache = nullptr;
}

}  // namespace fp4gemm::python
