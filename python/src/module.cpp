// fp4gemm._fp4gemm: the nanobind extension behind the `fp4gemm` Python package.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string_view>

#include <cuda_runtime.h>

#include "fp4gemm/fp4gemm.hpp"
#include "fp4gemm/moe.hpp"
#include "checks.hpp"
#include "dual.hpp"
#include "grouped.hpp"
#include "moe.hpp"
#include "moe_layer.hpp"
#include "torch_native.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace fp4gemm::python {
void bind_formats(nb::module_& m);
void bind_ep(nb::module_& m);
}

namespace {

using fp4gemm::python::Binding;
using fp4gemm::python::BoundGemm;
using fp4gemm::python::DualGemmObject;
using fp4gemm::python::MoeBinding;
using fp4gemm::python::MoeGemmObject;
using fp4gemm::python::MoeLayerObject;

PyObject* g_argument_error = nullptr;  // fp4gemm.ArgumentError(ValueError)
PyObject* g_device_error = nullptr;    // fp4gemm.DeviceError(RuntimeError)

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const fp4gemm::Error& e) {
    PyObject* type = fp4gemm::python::is_runtime_failure(e) ? g_device_error : g_argument_error;
    PyObject* exc = PyObject_CallFunction(type, "s", e.what());
    if (!exc) return;  // the failure to build it is the pending error
    PyObject* arg = PyUnicode_FromString(e.argument().c_str());
    PyObject* group = PyLong_FromLong(e.group());
    if (arg) PyObject_SetAttrString(exc, "argument", arg);
    if (group) PyObject_SetAttrString(exc, "group", group);
    Py_XDECREF(arg);
    Py_XDECREF(group);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
  }
}

nb::dict device_info(int device) {
  const fp4gemm::DeviceInfo d = fp4gemm::device_info(device);
  nb::dict r;
  r["index"] = d.index;
  r["name"] = d.name;
  r["sm"] = nb::make_tuple(d.sm_major, d.sm_minor);
  r["multiprocessors"] = d.multiprocessors;
  r["l2_bytes"] = d.l2_bytes;
  r["smem_per_block_optin"] = d.smem_per_block_optin;
  r["has_fast_kernel"] = d.has_fast_kernel;
  return r;
}

}  // namespace

NB_MODULE(_fp4gemm, m) {
  m.doc() = "fp4gemm native extension (use the `fp4gemm` package)";

  g_argument_error = PyErr_NewExceptionWithDoc(
      "fp4gemm.ArgumentError",
      "An invalid argument (shape, dtype, stride, device, option). `argument` names it, `group` is its group or -1.",
      PyExc_ValueError, nullptr);
  g_device_error = PyErr_NewExceptionWithDoc(
      "fp4gemm.DeviceError",
      "A CUDA failure or an unusable device / backend. `argument` names the step, `group` is -1.",
      PyExc_RuntimeError, nullptr);
  m.attr("ArgumentError") = nb::handle(g_argument_error);
  m.attr("DeviceError") = nb::handle(g_device_error);
  // swigluoai's constants as gpt-oss sets them: the defaults of every swiglu_alpha / swiglu_limit
  m.attr("SWIGLU_ALPHA") = fp4gemm::kSwigluAlpha;
  m.attr("SWIGLU_LIMIT") = fp4gemm::kSwigluLimit;
  nb::register_exception_translator(&translate);

  m.def("grouped_gemm",
        [](nb::handle a, nb::handle b, nb::handle sfa, nb::handle sfb, nb::handle c, nb::handle alpha,
           nb::handle format, nb::handle scale_layout, nb::handle out_dtype, nb::handle backend, nb::handle stream,
           int threads) {
          Binding::get().grouped_gemm(a, b, sfa, sfb, c, alpha, format, scale_layout, out_dtype, backend, stream,
                                      threads);
        },
        "a"_a, "b"_a, "sfa"_a, "sfb"_a, "c"_a, "alpha"_a = nb::none(), "format"_a = "nvfp4",
        "scale_layout"_a = "linear", "out_dtype"_a = "float16", "backend"_a = nb::none(), "stream"_a = nb::none(),
        "threads"_a = 0,
        "Grouped GEMM into preallocated outputs `c` (see fp4gemm.grouped_gemm).");

  m.def("dual_gemm",
        [](nb::handle a, nb::handle b1, nb::handle b2, nb::handle sfa, nb::handle sfb1, nb::handle sfb2, nb::handle c,
           nb::handle format, nb::handle scale_layout, nb::handle out_dtype, const std::string& activation,
           float swiglu_alpha, float swiglu_limit, nb::handle stream, int threads, bool batches) {
          Binding::get().dual_gemm(a, b1, b2, sfa, sfb1, sfb2, c, format, scale_layout, out_dtype, activation,
                                   swiglu_alpha, swiglu_limit, stream, threads, batches);
        },
        "a"_a, "b1"_a, "b2"_a, "sfa"_a, "sfb1"_a, "sfb2"_a, "c"_a, "format"_a = "nvfp4", "scale_layout"_a = "linear",
        "out_dtype"_a = "float16", "activation"_a = "silu", "swiglu_alpha"_a = fp4gemm::kSwigluAlpha,
        "swiglu_limit"_a = fp4gemm::kSwigluLimit, "stream"_a = nb::none(), "threads"_a = 0, "batches"_a = false,
        "Dual GEMM into preallocated outputs `c` in one call, behind the grouped GEMM's call memo and plan cache "
        "(see fp4gemm.dual_gemm).");

  nb::class_<BoundGemm>(m, "GroupedGemm",
                        "A plan bound once to its arrays; run() only enqueues the kernel. The arrays (and torch "
                        "storages) are kept alive; their contents may change between runs, their addresses, shapes, "
                        "strides and dtypes may not (run() raises ArgumentError if a torch tensor's did).")
      .def(nb::init<nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle,
                    nb::handle, nb::handle>(),
           "a"_a, "b"_a, "sfa"_a, "sfb"_a, "c"_a, "alpha"_a = nb::none(), "format"_a = "nvfp4",
           "scale_layout"_a = "linear", "out_dtype"_a = "float16", "backend"_a = nb::none())
      .def("run", &BoundGemm::run, "stream"_a = nb::none(), "Enqueue on `stream` (default: the framework's current stream).")
      .def("__call__", &BoundGemm::run, "stream"_a = nb::none())
      .def_prop_ro("kernel_name", &BoundGemm::kernel_name)
      .def_prop_ro("flops", &BoundGemm::flops)
      .def_prop_ro("min_bytes", &BoundGemm::min_bytes)
      .def_prop_ro("num_groups", &BoundGemm::num_groups)
      .def_prop_ro("outputs", &BoundGemm::outputs)
      .def("describe", &BoundGemm::describe);

  nb::class_<DualGemmObject>(m, "DualGemm",
                              "The dual GEMM C = act(alpha A B1^T, alpha_up A B2^T) per group (SwiGLU: silu, gpt-oss: "
                              "swigluoai), bound once to its arrays like GroupedGemm (see fp4gemm.DualGemm).")
      .def(nb::init<nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle,
                    nb::handle, nb::handle, nb::handle, nb::handle, const std::string&, float, float, bool>(),
           "a"_a, "b1"_a, "b2"_a, "sfa"_a, "sfb1"_a, "sfb2"_a, "c"_a, "alpha"_a = nb::none(), "alpha_up"_a = nb::none(),
           "format"_a = "nvfp4", "scale_layout"_a = "linear", "out_dtype"_a = "float16", "activation"_a = "silu",
           "swiglu_alpha"_a = fp4gemm::kSwigluAlpha, "swiglu_limit"_a = fp4gemm::kSwigluLimit, "rescale_each_run"_a = false)
      .def("run", &DualGemmObject::run, "stream"_a = nb::none(), "threads"_a = 0,
           "Enqueue on `stream` (CUDA arrays), or compute with the CPU reference now (host arrays).")
      .def("__call__", &DualGemmObject::run, "stream"_a = nb::none(), "threads"_a = 0)
      .def_prop_ro("flops", &DualGemmObject::flops)
      .def_prop_ro("num_groups", &DualGemmObject::num_groups)
      .def_prop_ro("outputs", &DualGemmObject::outputs)
      .def("describe", &DualGemmObject::describe);

  nb::class_<MoeGemmObject>(m, "MoeGemm",
                            "The MoE grouped GEMM planned once for a weight set (use fp4gemm.moe.MoeGemm, which "
                            "allocates outputs).")
      .def(nb::init<nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, int,
                    nb::handle, const std::string&, const std::string&, nb::handle, nb::handle, nb::handle, float,
                    float, bool>(),
           "w"_a, "w_scales"_a, "format"_a = nb::none(), "scale_layout"_a = "blocked", "out_dtype"_a = "bfloat16",
           "activation"_a = "fp4", "layout"_a = "contiguous", "capacity"_a, "alpha"_a = nb::none(),
           "epilogue"_a = "none", "gate_up"_a = "stacked", "w_up"_a = nb::none(), "w_up_scales"_a = nb::none(),
           "alpha_up"_a = nb::none(), "swiglu_alpha"_a = fp4gemm::kSwigluAlpha, "swiglu_limit"_a = fp4gemm::kSwigluLimit,
           "rescale_each_run"_a = false)
      .def("run", &MoeGemmObject::run, "a"_a, "a_scales"_a = nb::none(), "expert_offsets"_a = nb::none(),
           "expert_counts"_a = nb::none(), "gather_index"_a = nb::none(), "out"_a, "stream"_a = nb::none(),
           "threads"_a = 0, "Enqueue one run into `out` (host arrays: run the CPU reference now).")
      .def("check", &MoeGemmObject::check, "stream"_a = nb::none(),
           "Synchronise `stream`, then raise ArgumentError naming expert_offsets / expert_counts / gather_index if a "
           "run since the last check saw bad routing data.")
      .def("reload_weights", &MoeGemmObject::reload_weights, "stream"_a = nb::none(),
           "Make the plan's copy of the weight scales again from the arrays (after in-place changes that torch's "
           "version counter does not see, or before replaying a captured graph).")
      .def("describe", &MoeGemmObject::describe)
      .def_prop_ro("kernel_name", &MoeGemmObject::kernel_name)
      .def_prop_ro("experts", [](const MoeGemmObject& g) { return g.weights().experts; })
      .def_prop_ro("n", [](const MoeGemmObject& g) { return g.weights().n; })
      .def_prop_ro("k", [](const MoeGemmObject& g) { return g.weights().k; })
      .def_prop_ro("capacity", [](const MoeGemmObject& g) { return g.options().capacity; })
      .def_prop_ro("rows", &MoeGemmObject::rows)
      .def_prop_ro("format", [](const MoeGemmObject& g) { return std::string(fp4gemm::to_string(g.options().format)); })
      .def_prop_ro("scale_layout",
                   [](const MoeGemmObject& g) { return std::string(fp4gemm::to_string(g.options().scale_layout)); })
      .def_prop_ro("out_dtype", [](const MoeGemmObject& g) {
        const fp4gemm::OutType t = g.options().out_type;
        return std::string(t == fp4gemm::OutType::f16 ? "float16" : t == fp4gemm::OutType::bf16 ? "bfloat16" : "float32");
      })
      .def_prop_ro("activation",
                   [](const MoeGemmObject& g) { return std::string(fp4gemm::to_string(g.options().activation)); })
      .def_prop_ro("layout", [](const MoeGemmObject& g) { return std::string(fp4gemm::to_string(g.options().layout)); })
      .def_prop_ro("on_host", &MoeGemmObject::on_host)
      .def_prop_ro("device_bytes", &MoeGemmObject::device_bytes);

  nb::class_<MoeLayerObject>(m, "MoeLayer",
                             "The whole MoE expert layer planned once for a weight set (use fp4gemm.moe.MoeLayer).")
      .def("__init__",
           [](MoeLayerObject* self, nb::handle w13, nb::handle w13_scales, nb::handle w2, nb::handle w2_scales,
              nb::handle w13_alpha, nb::handle w13_alpha_up, nb::handle w2_alpha, nb::handle format,
              nb::handle act_format, nb::handle scale_layout, const std::string& activation,
              const std::string& gate_up, float swiglu_alpha, float swiglu_limit, float a1_scale, float a2_scale,
              int max_tokens, int topk, bool batch_invariant, int decode_tokens, nb::handle w13_bias,
              nb::handle w2_bias, bool combine, const std::string& weight_layout) {
             fp4gemm::MoeLayerOptions o;
             const fp4gemm::MoeActivation acts = fp4gemm::python::parse_moe_activation(act_format);
             o.activations = acts;
             o.format = format.is_none() ? (acts == fp4gemm::MoeActivation::bf16 ? fp4gemm::Format::mxfp4
                                                                                 : fp4gemm::Format::nvfp4)
                                         : fp4gemm::python::parse_format(format);
             o.scale_layout = fp4gemm::python::parse_layout(scale_layout);
             if (activation == "silu") o.activation = fp4gemm::MoeEpilogue::silu;
             else if (activation == "swigluoai") o.activation = fp4gemm::MoeEpilogue::swigluoai;
             else throw fp4gemm::Error("activation", -1, "'" + activation + "' is not one of 'silu', 'swigluoai'");
             if (gate_up == "stacked") o.gate_up = fp4gemm::GateUpLayout::stacked;
             else if (gate_up == "interleaved") o.gate_up = fp4gemm::GateUpLayout::interleaved;
             else throw fp4gemm::Error("gate_up", -1, "'" + gate_up + "' is not one of 'stacked', 'interleaved'");
             o.swiglu_alpha = swiglu_alpha, o.swiglu_limit = swiglu_limit;
             o.a1_scale = a1_scale, o.a2_scale = a2_scale, o.max_tokens = max_tokens, o.topk = topk;
             o.batch_invariant = batch_invariant, o.decode_tokens = decode_tokens, o.combine = combine;
             if (weight_layout == "rows") o.weight_layout = fp4gemm::WeightLayout::rows;
             else if (weight_layout == "pieces") o.weight_layout = fp4gemm::WeightLayout::pieces;
             else throw fp4gemm::Error("weight_layout", -1, "'" + weight_layout + "' is not one of 'rows', 'pieces'");
             new (self) MoeLayerObject(w13, w13_scales, w2, w2_scales, w13_alpha, w13_alpha_up, w2_alpha, o, w13_bias,
                                       w2_bias);
           },
           "w13"_a, "w13_scales"_a, "w2"_a, "w2_scales"_a, "w13_alpha"_a = nb::none(), "w13_alpha_up"_a = nb::none(),
           "w2_alpha"_a = nb::none(), "format"_a = nb::none(), "act_format"_a = "fp4", "scale_layout"_a = "blocked",
           "activation"_a = "silu", "gate_up"_a = "stacked", "swiglu_alpha"_a = fp4gemm::kSwigluAlpha, "swiglu_limit"_a = fp4gemm::kSwigluLimit,
           "a1_scale"_a = 1.0f, "a2_scale"_a = 1.0f, "max_tokens"_a, "topk"_a,
           "batch_invariant"_a = false, "decode_tokens"_a = -1, "w13_bias"_a = nb::none(), "w2_bias"_a = nb::none(),
           "combine"_a = true, "weight_layout"_a = "rows")
      .def("run", &MoeLayerObject::run, "hidden_states"_a.none(), "topk_ids"_a, "topk_weights"_a, "out"_a.none(),
           "stream"_a = nb::none(), "threads"_a = 0, "hidden_packed"_a = nb::none(), "hidden_scales"_a = nb::none(),
           "token_count"_a = nb::none(), "expert_rows"_a = nb::none(), "row_of"_a = nb::none(),
           "Enqueue the layer into `out` (host arrays: run the reference now), or, with expert_rows / row_of, "
           "stop before the combine.")
      .def("check", &MoeLayerObject::check, "stream"_a = nb::none(),
           "Synchronise `stream`, then raise if a run since the last check saw bad routing data.")
      .def("reload_weights", &MoeLayerObject::reload_weights, "stream"_a = nb::none(),
           "Make the layer's copies of the weight scales (and folded alphas) again from the arrays.")
      .def("describe", &MoeLayerObject::describe)
      .def_prop_ro("experts", [](const MoeLayerObject& l) { return l.weights().experts; })
      .def_prop_ro("hidden", [](const MoeLayerObject& l) { return l.weights().hidden; })
      .def_prop_ro("inter", [](const MoeLayerObject& l) { return l.weights().inter; })
      .def_prop_ro("topk", [](const MoeLayerObject& l) { return l.options().topk; })
      .def_prop_ro("max_tokens", [](const MoeLayerObject& l) { return l.options().max_tokens; })
      .def_prop_ro("on_host", &MoeLayerObject::on_host)
      .def_prop_ro("device_bytes", &MoeLayerObject::device_bytes);


  m.def("moe_grouped_gemm",
        [](nb::handle a, nb::handle a_scales, nb::handle w, nb::handle w_scales, nb::handle expert_offsets,
           nb::handle gather_index, nb::handle out, nb::handle alpha, nb::handle format, nb::handle scale_layout,
           nb::handle out_dtype, nb::handle activation, nb::handle stream, int threads) {
          MoeBinding::get().grouped_gemm(a, a_scales, w, w_scales, expert_offsets, gather_index, out, alpha, format,
                                         scale_layout, out_dtype, activation, stream, threads);
        },
        "a"_a, "a_scales"_a.none(), "w"_a, "w_scales"_a, "expert_offsets"_a, "gather_index"_a.none(), "out"_a,
        "alpha"_a = nb::none(), "format"_a = nb::none(), "scale_layout"_a = "blocked", "out_dtype"_a = "bfloat16",
        "activation"_a = nb::none(), "stream"_a = nb::none(), "threads"_a = 0,
        "MoE grouped GEMM into a preallocated `out` (see fp4gemm.moe.grouped_gemm).");
  m.def("align_routing",
        [](std::uintptr_t ids, bool ids_int64, std::int64_t count, int k, int experts, std::uintptr_t offsets,
           std::uintptr_t gather, std::uintptr_t order, std::uintptr_t stream, int device) {
          // The caller (fp4gemm.moe.align_routing) made the outputs with torch on the ids' device and
          // checked the ids (contiguous int32/int64 CUDA tensor): no pointer checks here (µs each).
          int current = -1;
          if (cudaGetDevice(&current) != cudaSuccess) current = -1;
          if (current != device && cudaSetDevice(device) != cudaSuccess)
            throw fp4gemm::Error("topk_ids", -1, "cannot make CUDA device " + std::to_string(device) + " current");
          struct Restore {
            int device;
            ~Restore() {
              if (device >= 0) cudaSetDevice(device);
            }
          } restore{current != device ? current : -1};
          nb::gil_scoped_release release;
          fp4gemm::detail::launch_align_routing(reinterpret_cast<const void*>(ids), ids_int64, count, k, experts,
                                                reinterpret_cast<int*>(offsets), reinterpret_cast<int*>(gather),
                                                reinterpret_cast<std::int64_t*>(order),
                                                reinterpret_cast<cudaStream_t>(stream));
        },
        "ids"_a, "ids_int64"_a, "count"_a, "k"_a, "experts"_a, "offsets"_a, "gather"_a, "order"_a, "stream"_a,
        "device"_a, "Device routing alignment on raw CUDA pointers (see fp4gemm.moe.align_routing).");
  m.def("moe_combine", &fp4gemm::python::combine, "y"_a, "topk_weights"_a, "topk_ids"_a, "experts"_a, "out"_a,
        "stream"_a = nb::none(), "The expert layer's top-k combine, host or CUDA arrays (use fp4gemm.ep.combine).");
  m.def("quantize_activations", &fp4gemm::python::quantize_on_device, "x"_a, "packed"_a, "scales"_a, "format"_a,
        "scale_layout"_a, "global_scale"_a, "stream"_a,
        "fp4gemm::quantize_activations on CUDA arrays into packed / scales (use fp4gemm.quantize).");
  m.def("pack_pieces", &fp4gemm::python::pack_pieces_on_device, "w"_a, "out"_a, "gate_up"_a.none(), "format"_a, "stream"_a,
        "fp4gemm::pack_pieces (gate_up None) / pack_pieces_gate_up on CUDA arrays (use fp4gemm.pack_pieces).");
  m.def("moe_check", [](nb::handle stream) { MoeBinding::get().check(stream); }, "stream"_a = nb::none(),
        "Check every cached MoE plan for bad routing data seen by its runs (synchronises).");

  nb::class_<fp4gemm::python::FusedExpertsCache>(
      m, "FusedExpertsCache", "fp4gemm.moe.fused_experts' plan cache and hot path (use fp4gemm.moe.fused_experts).")
      .def(nb::init<>())
      .def("__call__", &fp4gemm::python::FusedExpertsCache::call, "hidden_states"_a.none(), "w13"_a.none(),
           "w13_scale"_a.none(), "w2"_a.none(), "w2_scale"_a.none(), "topk_weights"_a.none(), "topk_ids"_a.none(),
           "w13_alpha"_a.none() = nb::none(), "w13_alpha_up"_a.none() = nb::none(), "w2_alpha"_a.none() = nb::none(),
           "activation"_a.none() = "silu", "act_format"_a.none() = "nvfp4", "gate_up"_a.none() = nb::none(),
           "scale_layout"_a.none() = "blocked", "a1_scale"_a = 1.0, "a2_scale"_a = 1.0,
           "swiglu_alpha"_a = fp4gemm::python::FusedExpertsCache::kOpSwigluAlpha,
           "swiglu_limit"_a = fp4gemm::python::FusedExpertsCache::kOpSwigluLimit, "out"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
           "w13_bias"_a.none() = nb::none(), "w2_bias"_a.none() = nb::none(), "weight_layout"_a.none() = "rows")
      .def("clear", &fp4gemm::python::FusedExpertsCache::clear)
      .def("plans", &fp4gemm::python::FusedExpertsCache::plans, "The plans keyed on the weights' addresses (tests).")
      .def("retired", &fp4gemm::python::FusedExpertsCache::retired, "How many superseded plans are kept (tests).")
      .def("__len__", &fp4gemm::python::FusedExpertsCache::size);

  m.def("_register_torch_native",
        [](const std::string& lib_dir, fp4gemm::python::FusedExpertsCache* cache) {
          nb::dict d;
          for (const auto& [op, status] : fp4gemm::python::register_torch_native(lib_dir, cache))
            d[nb::str(op.c_str())] = nb::str(status.c_str());
          return d;
        },
        "lib_dir"_a, "cache"_a,
        "Internal (fp4gemm.ops): registers the C++ CUDA kernels of torch.ops.fp4gemm.fused_experts and "
        "moe_grouped_gemm through torch's stable C ABI; returns {op: '' when registered, else why not}.");
  m.def("_torch_native_counts", [] {
    const auto [hot, python] = fp4gemm::python::torch_native_counts();
    return nb::make_tuple(hot, python);
  }, "Internal (tests): calls of the native kernels so far, (C++ hot path, forwarded to the Python kernel).");
  m.def("_torch_native_error", [](const std::string& message) { fp4gemm::python::set_torch_native_error(message); },
        "Internal (fp4gemm.ops): the Python path reports an exception to the native kernel, which raises it.");
  m.def("_torch_native_forwarding", [] { return fp4gemm::python::torch_native_forwarding(); },
        "Internal (fp4gemm.ops): whether a native kernel is calling its Python kernel on this thread.");

  m.def("_read_tensors",
        [](nb::args arrays) {
          // bench/host_overhead.py: what reading array arguments costs the bindings (as every run
          // reads them: framework probe, shape, strides, dtype, device, address, allocation bounds).
          fp4gemm::python::TensorReader& reader = Binding::get().reader();
          fp4gemm::python::Keepalive keep;
          std::int64_t elements = 0;
          for (nb::handle a : arrays) elements += reader.read(a, "array", -1, false, keep).numel();
          return elements;
        },
        "Internal (bench/host_overhead.py): reads each array as the bindings do; returns their total elements.");

  m.def("device_count", &fp4gemm::device_count, "Number of usable CUDA devices (0 without a GPU or driver).");
  m.def("device_info", &device_info, "device"_a = -1, "Name, compute capability, SMs, L2, fast-kernel support.");

  m.def("plan_cache_info", []() {
    const auto s = Binding::get().stats();
    const auto moe = MoeBinding::get().stats();
    nb::dict r;
    r["plans"] = s.plans;
    r["memo"] = s.memo;
    r["pinned"] = s.pinned;
    r["capacity"] = s.capacity;
    r["bytes"] = s.bytes;
    r["max_bytes"] = s.max_bytes;
    r["hits"] = s.hits;
    r["misses"] = s.misses;
    r["memo_hits"] = s.memo_hits;
    r["moe_plans"] = moe.plans;
    r["moe_pinned"] = moe.pinned;
    r["moe_bytes"] = moe.bytes;
    r["moe_hits"] = moe.hits;
    r["moe_misses"] = moe.misses;
    r["moe_memo_hits"] = moe.memo_hits;
    return r;
  }, "Sizes, device bytes held and hit counts of the plan caches (grouped GEMM; moe_*: fp4gemm.moe.grouped_gemm; "
     "moe_memo_hits: torch.ops.fp4gemm.moe_grouped_gemm calls run from the memo of the previous call, also counted "
     "in moe_hits).");
  m.def("clear_plan_cache", [](bool pinned) {
    Binding::get().clear_cache(pinned);
    MoeBinding::get().clear_cache(pinned);
  }, "pinned"_a = false,
        "Drop cached plans (and, with pinned=True, the plans captured in CUDA graphs: only when those graphs are gone).");
  m.def("set_plan_cache_capacity", [](std::size_t n) {
    Binding::get().set_capacity(n);
    MoeBinding::get().set_capacity(n);
  }, "capacity"_a, "Maximum number of cached plans (LRU; default 64), for each of the two caches.");
  m.def("set_plan_cache_max_bytes", [](std::size_t n) {
    Binding::get().set_max_bytes(n);
    MoeBinding::get().set_max_bytes(n);
  }, "max_bytes"_a,
        "Maximum device memory (bytes) the cached plans may hold together (LRU; default 1 GiB), for each of the two "
        "caches. The most recently used plan stays cached even when it alone is larger; plans pinned by CUDA "
        "graphs are not counted.");
  m.def("set_default_backend", [](nb::handle b) {
    Binding::get().set_default_backend(fp4gemm::python::parse_backend(b, fp4gemm::Backend::automatic));
  }, "backend"_a, "Backend used when a call passes backend=None: 'auto', 'fast' or 'reference'.");
  m.def("get_default_backend", []() { return std::string(fp4gemm::to_string(Binding::get().default_backend())); });

  fp4gemm::python::bind_formats(m);
  fp4gemm::python::bind_ep(m);
}
