// fp4gemm.moe for Python: reading and checking the MoE arrays, MoeGemm objects, the cached call,
// and the host (NumPy) path that runs reference::moe_gemm.
#include "moe.hpp"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <optional>

#include "checks.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/reference.hpp"
#include "grouped.hpp"
#include "host/core/moe_validate.hpp"
#include "host/core/validate.hpp"

namespace fp4gemm::python {

namespace {

std::string dims(std::initializer_list<std::int64_t> v) {
  std::string s = "[";
  bool first = true;
  for (std::int64_t x : v) {
    if (!first) s += ", ";
    s += std::to_string(x);
    first = false;
  }
  return s + "]";
}

// ---- options -------------------------------------------------------------------------------------

// format None: mxfp4 for bf16 activations (the only weight format W4A16 takes), else nvfp4.
MoeOptions parse_moe_options(nb::handle format, nb::handle scale_layout, nb::handle out_dtype, MoeActivation activation,
                             nb::handle layout, int capacity) {
  MoeOptions o;
  o.activation = activation;
  o.format = format.is_none() ? (activation == MoeActivation::bf16 ? Format::mxfp4 : Format::nvfp4)
                              : parse_format(format);
  o.scale_layout = parse_layout(scale_layout);
  o.out_type = parse_out(out_dtype);
  o.layout = parse_moe_layout(layout);
  o.capacity = capacity;
  return o;
}

// ---- weights ---------------------------------------------------------------------------------------

// w: [E, N, K/2] packed e2m1, K-contiguous. Row and expert strides are taken from the view.
void read_w(const TensorView& t, MoeWeights& w) {
  if (t.dtype != DType::byte && t.dtype != DType::fp4x2)
    throw Error("w", -1, std::string("has dtype ") + to_string(t.dtype) +
                             "; packed FP4 weights must be uint8 (or float4_e2m1fn_x2), two values per byte");
  if (t.ndim != 3) throw Error("w", -1, "must be 3-D [experts, N, K/2], got shape " + t.shape_text());
  for (int i = 0; i < 3; ++i)
    if (t.strides[i] < 0) throw Error("w", -1, "has negative strides " + t.strides_text());
  const std::int64_t e = t.shape[0], n = t.shape[1], half_k = t.shape[2];
  if (e > INT32_MAX || n > INT32_MAX || 2 * half_k > INT32_MAX)
    throw Error("w", -1, "dimensions exceed 2^31 - 1 (shape " + t.shape_text() + ")");
  if (half_k > 1 && t.strides[2] != 1)
    throw Error("w", -1, "must be contiguous along K, got strides " + t.strides_text() + " for shape " + t.shape_text());
  w.experts = static_cast<int>(e);
  w.n = static_cast<int>(n);
  w.k = static_cast<int>(2 * half_k);
  // A dimension of size 1 has no meaningful stride: dense, as validate_moe's defaults would be.
  w.ldw = n > 1 ? t.strides[1] : (half_k + 15) / 16 * 16;
  if (n > 1 && t.strides[1] < half_k)
    throw Error("w", -1, "has overlapping rows (strides " + t.strides_text() + " for shape " + t.shape_text() + ")");
  w.expert_stride = e > 1 ? t.strides[0] : n * w.ldw;
  if (e > 1 && t.strides[0] < n * w.ldw)
    throw Error("w", -1, "has overlapping experts (strides " + t.strides_text() + " for shape " + t.shape_text() + ")");
  w.w = reinterpret_cast<const void*>(t.ptr);
}

// w_scales: per expert [N, K/vec] (linear) or the blocked layout's bytes of N rows (flat, or
// [pad128(N), pad4(K/vec)]), dense within an expert; the expert stride is taken from the view.
void read_w_scales(const TensorView& t, const MoeOptions& o, MoeWeights& w, const char* arg = "w_scales") {
  check_scale_dtype(t, arg, -1, o.format);
  const std::int64_t rows = detail::moe_weight_rows(w, o);  // N, or 2N for a GLU's gate and up
  const std::int64_t cols = w.k / scale_block_size(o.format);
  const std::int64_t bytes = static_cast<std::int64_t>(formats::scale_bytes(o.scale_layout, rows, cols));
  const std::string expected =
      o.scale_layout == ScaleLayout::linear
          ? dims({w.experts, rows, cols}) + " (linear layout: [experts, N, K/" +
                std::to_string(scale_block_size(o.format)) + "])"
          : dims({w.experts, bytes}) + " or " +
                dims({w.experts, formats::padded_rows(rows), formats::padded_scale_cols(cols)}) +
                " (blocked layout: N padded to 128 rows, K/vec to 4 columns, per expert)";
  if (t.ndim < 2 || t.shape[0] != w.experts)
    throw Error(arg, -1, "has shape " + t.shape_text() + "; expected " + expected);
  std::int64_t per_expert = 1;
  for (int i = 1; i < t.ndim; ++i) per_expert *= t.shape[i];
  const bool shape_ok = o.scale_layout == ScaleLayout::linear ? t.ndim == 3 && t.shape[1] == rows && t.shape[2] == cols
                                                              : per_expert == bytes;
  if (!shape_ok) throw Error(arg, -1, "has shape " + t.shape_text() + "; expected " + expected);
  TensorView one = t;  // one expert: dense row-major
  one.ndim = t.ndim - 1;
  for (int i = 0; i < one.ndim; ++i) one.shape[i] = t.shape[i + 1], one.strides[i] = t.strides[i + 1];
  if (!is_row_major_dense(one) || t.strides[0] < 0)
    throw Error(arg, -1, "must be dense and row-major within each expert (strides " + t.strides_text() +
                                    " for shape " + t.shape_text() + ")");
  (std::string(arg) == "w_scales" ? w.scales : w.scales_up) = reinterpret_cast<const void*>(t.ptr);
  w.scale_expert_stride = w.experts > 1 ? t.strides[0] : bytes;
  if (w.experts > 1 && t.strides[0] < bytes)
    throw Error(arg, -1, "has overlapping experts (strides " + t.strides_text() + " for shape " +
                                    t.shape_text() + ")");
}

// A 1-D array of `count` elements with unit stride (a single element has any stride).
bool is_vector(const TensorView& t, std::int64_t count) {
  return t.ndim == 1 && t.shape[0] == count && (count <= 1 || t.strides[0] == 1);
}

std::int64_t weight_bytes(const MoeWeights& w, const MoeOptions& o) {
  return (w.experts - 1) * w.expert_stride + (detail::moe_weight_rows(w, o) - 1) * w.ldw + w.k / 2;
}

std::int64_t weight_scale_bytes(const MoeWeights& w, const MoeOptions& o) {
  const std::int64_t cols = w.k / scale_block_size(o.format);
  return (w.experts - 1) * w.scale_expert_stride +
         static_cast<std::int64_t>(formats::scale_bytes(o.scale_layout, detail::moe_weight_rows(w, o), cols));
}

// Device memory behind a CUDA array the binding cannot see the allocation of (DLPack producers
// other than torch): asked of the driver. Torch storages and NumPy buffers: check_in_allocation.
void check_extent(const TensorView& t, const char* arg, std::int64_t bytes, const char* verb, const std::string& note) {
  check_in_allocation(t, arg, -1, bytes, verb, note);
  if (t.cuda && !t.has_alloc && bytes > 0)
    detail::check_device_buffer(arg, -1, reinterpret_cast<const void*>(t.ptr), bytes, t.device, note);
}

// alpha / alpha_up as passed: None, a number, or an array (read; checked in apply_alpha).
MoeAlphaArg read_alpha_arg(TensorReader& reader, nb::handle h, const char* name, Keepalive& keep) {
  MoeAlphaArg a;
  if (h.is_none()) return a;
  a.given = true;
  if (PyFloat_Check(h.ptr()) || PyLong_Check(h.ptr())) {
    a.scalar = static_cast<float>(PyFloat_AsDouble(h.ptr()));
    if (PyErr_Occurred()) throw nb::python_error();
    return a;
  }
  a.view = reader.read(h, name, -1, false, keep);
  a.is_array = true;
  return a;
}

// alpha / alpha_up into the weights: a number (`scalar`), or a float32 array of one value per
// expert on the weights' device (`view`; `device` points at it for CUDA weights).
void apply_alpha(const MoeAlphaArg& a, const char* name, const MoeWeightsRead& r, float& scalar, const float*& device,
                 TensorView& view, bool& is_array) {
  if (!a.given) return;
  if (!a.is_array) {
    scalar = a.scalar;
    return;
  }
  const int experts = r.weights.experts;
  view = a.view;
  is_array = true;
  if (view.dtype != DType::f32 || !is_vector(view, experts))
    throw Error(name, -1, "must be a number or a float32 array of one value per expert [" + std::to_string(experts) +
                              "] with unit stride, got " + std::string(to_string(view.dtype)) + " of shape " +
                              view.shape_text());
  if (view.cuda != r.cuda || (r.cuda && view.device != r.device))
    throw Error(name, -1, "is on " + view.device_text() + " but w is on " + r.w.device_text() +
                              "; all arrays of a call must live on one device");
  if (r.cuda) device = reinterpret_cast<const float*>(view.ptr);
}

}  // namespace

MoeWeightsRead moe_weights_from_views(const TensorView& w, const TensorView& w_scales, const MoeAlphaArg& alpha,
                                      const MoeOptions& o, const TensorView* w_up, const TensorView* w_up_scales,
                                      const MoeAlphaArg& alpha_up) {
  MoeWeightsRead r;
  r.w = w;
  r.scales = w_scales;
  r.cuda = r.w.cuda;
  r.device = r.w.device;
  r.framework = r.w.framework;
  if (r.scales.cuda != r.cuda || (r.cuda && r.scales.device != r.device))
    throw Error("w_scales", -1, "is on " + r.scales.device_text() + " but w is on " + r.w.device_text() +
                                    "; all arrays of a call must live on one device");
  MoeWeights& mw = r.weights;
  read_w(r.w, mw);
  const bool glu = o.epilogue != MoeEpilogue::none, separate = glu && o.gate_up == GateUpLayout::separate;
  if (glu && !separate) {  // w holds gate and up: 2I rows, the output width I
    if (mw.n % 2 != 0)
      throw Error("w", -1, "has " + std::to_string(mw.n) + " rows per expert; a GLU with " + to_string(o.gate_up) +
                               " gate and up rows needs 2 * I");
    mw.n /= 2;
  }
  read_w_scales(r.scales, o, mw);
  if (separate) {
    if (w_up == nullptr || w_up_scales == nullptr)
      throw Error(w_up == nullptr ? "w_up" : "w_up_scales", -1, "gate_up='separate' needs the up weights and their scales");
    r.w_up = *w_up;
    r.scales_up = *w_up_scales;
    MoeWeights up;
    read_w(r.w_up, up);
    if (up.experts != mw.experts || up.n != mw.n || up.k != mw.k || up.ldw != mw.ldw || up.expert_stride != mw.expert_stride)
      throw Error("w_up", -1, "must have w's shape and strides (" + r.w.shape_text() + ", strides " + r.w.strides_text() +
                                  "), got " + r.w_up.shape_text() + ", strides " + r.w_up.strides_text());
    const std::int64_t stride = mw.scale_expert_stride;
    read_w_scales(r.scales_up, o, mw, "w_up_scales");
    if (mw.scale_expert_stride != stride)
      throw Error("w_up_scales", -1, "must have w_scales' expert stride");
    mw.w_up = reinterpret_cast<const void*>(r.w_up.ptr);
    r.has_up = true;
    for (const TensorView* v : {&r.w_up, &r.scales_up})
      if (v->cuda != r.cuda || (r.cuda && v->device != r.device))
        throw Error(v == &r.w_up ? "w_up" : "w_up_scales", -1, "is on " + v->device_text() + " but w is on " +
                                                                   r.w.device_text());
  } else if (w_up != nullptr || w_up_scales != nullptr) {
    throw Error(w_up != nullptr ? "w_up" : "w_up_scales", -1, "only gate_up='separate' takes separate up weights");
  }
  apply_alpha(alpha_up, "alpha_up", r, mw.alpha_up, mw.alpha_up_device, r.alpha_up, r.alpha_up_array);
  apply_alpha(alpha, "alpha", r, mw.alpha, mw.alpha_device, r.alpha, r.alpha_array);
  mw = detail::validate_moe(mw, o);
  check_extent(r.w, "w", weight_bytes(mw, o), "read", "");
  check_extent(r.scales, "w_scales", weight_scale_bytes(mw, o), "read",
               std::string(" (") + to_string(o.scale_layout) + " scales of every expert)");
  if (r.alpha_array) check_extent(r.alpha, "alpha", 4 * std::int64_t{mw.experts}, "read", "");
  if (r.has_up) {
    check_extent(r.w_up, "w_up", weight_bytes(mw, o), "read", "");
    check_extent(r.scales_up, "w_up_scales", weight_scale_bytes(mw, o), "read", "");
  }
  if (r.alpha_up_array) check_extent(r.alpha_up, "alpha_up", 4 * std::int64_t{mw.experts}, "read", "");
  return r;
}

namespace {

MoeWeightsRead read_weights(TensorReader& reader, nb::handle w, nb::handle w_scales, nb::handle alpha,
                            const MoeOptions& o, Keepalive& keep, nb::handle w_up = nb::none(),
                            nb::handle w_up_scales = nb::none(), nb::handle alpha_up = nb::none()) {
  const TensorView vw = reader.read(w, "w", -1, false, keep);
  const TensorView vs = reader.read(w_scales, "w_scales", -1, false, keep);
  TensorView vu, vus;
  if (!w_up.is_none()) vu = reader.read(w_up, "w_up", -1, false, keep);
  if (!w_up_scales.is_none()) vus = reader.read(w_up_scales, "w_up_scales", -1, false, keep);
  const MoeAlphaArg a_up = read_alpha_arg(reader, alpha_up, "alpha_up", keep);
  const MoeAlphaArg a = read_alpha_arg(reader, alpha, "alpha", keep);
  MoeWeightsRead r = moe_weights_from_views(vw, vs, a, o, w_up.is_none() ? nullptr : &vu,
                                            w_up_scales.is_none() ? nullptr : &vus, a_up);
  // Linear scales are converted to the blocked layout once, when the plan is built: a plan cached on
  // their address must not outlive an in-place change of them (torch counts those in _version).
  // (Inference tensors have no version counter: reading it raises, and they cannot change in place.)
  if (o.scale_layout == ScaleLayout::linear && r.scales.framework == Framework::torch) {
    PyObject* version = PyObject_GetAttrString(w_scales.ptr(), "_version");
    if (version != nullptr) r.scales_version = PyLong_AsUnsignedLongLong(version);
    Py_XDECREF(version);
    PyErr_Clear();
  }
  return r;
}

// The host copy of alpha for the reference: per expert, or null for 1.
std::vector<float> host_alpha(const MoeWeightsRead& wr) {
  const MoeWeights& w = wr.weights;
  if (wr.alpha_array) {
    const auto* p = reinterpret_cast<const float*>(wr.alpha.ptr);  // read now, as the device reads at run time
    return std::vector<float>(p, p + w.experts);
  }
  if (w.alpha == 1.0f) return {};
  return std::vector<float>(w.experts, w.alpha);
}

// ---- run arrays ------------------------------------------------------------------------------------

MoeRunViews read_run_views(TensorReader& reader, nb::handle a, nb::handle a_scales, nb::handle offsets,
                           nb::handle counts, nb::handle gather, nb::handle out, Keepalive& keep) {
  MoeRunViews v;
  v.a = reader.read(a, "a", -1, false, keep);
  if ((v.has_a_scales = !a_scales.is_none())) v.a_scales = reader.read(a_scales, "a_scales", -1, false, keep);
  if ((v.has_offsets = !offsets.is_none())) v.offsets = reader.read(offsets, "expert_offsets", -1, false, keep);
  if ((v.has_counts = !counts.is_none())) v.counts = reader.read(counts, "expert_counts", -1, false, keep);
  if ((v.has_gather = !gather.is_none())) v.gather = reader.read(gather, "gather_index", -1, false, keep);
  v.out = reader.read(out, "out", -1, true, keep);
  return v;
}

// The rows of a, a_scales or out as one matrix: 2-D [rows, cols]; in the masked layout also 3-D
// [experts, capacity, cols] with evenly strided expert slots (read as [experts * capacity, cols]).
Matrix read_rows(const TensorView& t, const char* arg, const MoeOptions& o, int experts, std::int64_t cols,
                 const char* cols_text) {
  TensorView v = t;
  if (o.layout == MoeLayout::masked && t.ndim == 3) {
    if (t.shape[0] != experts || t.shape[1] != o.capacity || t.shape[2] != cols)
      throw Error(arg, -1, "has shape " + t.shape_text() + "; the masked layout expects [experts, capacity, " +
                               cols_text + "] = " + dims({experts, o.capacity, cols}));
    v.ndim = 2;
    v.shape[0] = t.shape[0] * t.shape[1];
    v.shape[1] = t.shape[2];
    v.strides[1] = t.strides[2];
    // Slot rows must be evenly spaced across experts: row e * capacity + i at (e * capacity + i) * ld.
    v.strides[0] = t.shape[1] > 1 ? t.strides[1] : t.strides[0];
    if (t.shape[0] > 1 && t.shape[1] > 1 && t.strides[0] != t.shape[1] * t.strides[1])
      throw Error(arg, -1, "must have evenly strided expert slots (strides[0] == capacity * strides[1]), got strides " +
                               t.strides_text() + " for shape " + t.shape_text());
  } else if (t.ndim != 2) {
    throw Error(arg, -1, "must be 2-D [rows, " + std::string(cols_text) + "]" +
                             (o.layout == MoeLayout::masked ? " or 3-D [experts, capacity, " + std::string(cols_text) + "]"
                                                            : std::string()) +
                             ", got shape " + t.shape_text());
  }
  const Matrix m = read_matrix(v, arg, -1, false);
  if (m.cols != cols)
    throw Error(arg, -1, "has " + std::to_string(m.cols) + " columns (shape " + t.shape_text() + "); expected " +
                             cols_text + " = " + std::to_string(cols));
  return m;
}

void require_placement(const TensorView& t, const char* arg, const MoeWeightsRead& wr) {
  if (t.cuda != wr.cuda || (t.cuda && t.device != wr.device))
    throw Error(arg, -1, "is on " + t.device_text() + " but the weights are on " + wr.w.device_text() +
                             "; all arrays of a call must live on one device");
}

struct ByteRange {
  std::uintptr_t begin = 0, end = 0;
  const char* name = "";
};

ByteRange range_of(const TensorView& t, std::int64_t bytes, const char* name) {
  return ByteRange{t.ptr, t.ptr + static_cast<std::uintptr_t>(bytes < 0 ? 0 : bytes), name};
}

// Checks one run's arrays against the plan's weights and options; returns the library's arguments.
MoeRun check_run(const MoeRunViews& v, const MoeWeightsRead& wr, const MoeOptions& o) {
  const MoeWeights& w = wr.weights;
  const int experts = w.experts;
  const std::int64_t plan_rows = detail::moe_rows(experts, o);
  const bool fp4 = o.activation == MoeActivation::fp4;
  MoeRun run;
  MoeArgs& args = run.args;

  // a
  if (fp4 ? (v.a.dtype != DType::byte && v.a.dtype != DType::fp4x2) : (v.a.dtype != DType::bf16 && v.a.dtype != DType::raw16))
    throw Error("a", -1, std::string("has dtype ") + to_string(v.a.dtype) +
                             (fp4 ? "; FP4 activations (W4A4) must be uint8 (or float4_e2m1fn_x2), two values per byte"
                                  : "; bf16 activations (W4A16) must be bfloat16 (or raw 16-bit bits)"));
  const std::int64_t a_cols = fp4 ? w.k / 2 : w.k;
  const Matrix a = read_rows(v.a, "a", o, experts, a_cols, fp4 ? "K/2" : "K");
  const int elem = fp4 ? 1 : 2;
  if (a.rows > INT32_MAX) throw Error("a", -1, "has more than 2^31 - 1 rows");
  run.a_rows = static_cast<int>(a.rows);
  if (!v.has_gather && a.rows < plan_rows)
    throw Error("a", -1, "has " + std::to_string(a.rows) + " rows; the plan serves " + std::to_string(plan_rows) +
                             (o.layout == MoeLayout::masked ? " (experts x capacity)" : " (its capacity)") +
                             " and a run may read all of them (rows up to expert_offsets[E] <= capacity)" +
                             (o.layout == MoeLayout::contiguous ? ": pass a with that many rows, or a gather_index" : ""));
  if (v.has_gather && a.rows < 1) throw Error("a", -1, "has no rows to gather from");
  args.a = reinterpret_cast<const void*>(v.a.ptr);
  args.lda = a.ld * elem;
  std::vector<ByteRange> inputs;
  require_placement(v.a, "a", wr);
  const std::int64_t a_bytes = a.rows > 0 ? strided_bytes(a.rows, args.lda, a_cols * elem) : 0;
  check_extent(v.a, "a", a_bytes, "read", " (lda = " + std::to_string(args.lda) + " bytes)");
  inputs.push_back(range_of(v.a, a_bytes, "a"));

  // a_scales: linear [rows of a, K/vec], dense (the library takes no stride for them)
  if (fp4) {
    if (!v.has_a_scales) throw Error("a_scales", -1, "is None; FP4 activations need their scales");
    check_scale_dtype(v.a_scales, "a_scales", -1, o.format);
    const std::int64_t cols = w.k / scale_block_size(o.format);
    const Matrix s = read_rows(v.a_scales, "a_scales", o, experts, cols, "K/vec");
    if (s.rows != a.rows)
      throw Error("a_scales", -1, "has " + std::to_string(s.rows) + " rows but a has " + std::to_string(a.rows) +
                                      " (linear scales: one row per row of a)");
    if (s.rows > 1 && s.ld != cols)
      throw Error("a_scales", -1, "must be dense and row-major (row stride " + std::to_string(cols) + "), got strides " +
                                      v.a_scales.strides_text() + " for shape " + v.a_scales.shape_text());
    require_placement(v.a_scales, "a_scales", wr);
    args.a_scales = reinterpret_cast<const void*>(v.a_scales.ptr);
    check_extent(v.a_scales, "a_scales", s.rows * cols, "read", "");
    inputs.push_back(range_of(v.a_scales, s.rows * cols, "a_scales"));
  } else if (v.has_a_scales) {
    throw Error("a_scales", -1, "bf16 activations (W4A16) have no scales: pass None");
  }

  // routing
  auto int_vector = [&](const TensorView& t, const char* arg, std::int64_t count, bool at_least) {
    const bool ok = t.dtype == DType::i32 && t.ndim == 1 && (at_least ? t.shape[0] >= count : t.shape[0] == count) &&
                    (t.shape[0] <= 1 || t.strides[0] == 1);
    if (!ok)
      throw Error(arg, -1, std::string("must be a 1-D int32 array of ") + (at_least ? "at least " : "") +
                               std::to_string(count) + " entries with unit stride, got " + to_string(t.dtype) +
                               " of shape " + t.shape_text() + " (strides " + t.strides_text() + ")");
    require_placement(t, arg, wr);
    check_extent(t, arg, 4 * t.shape[0], "read", "");
    inputs.push_back(range_of(t, 4 * t.shape[0], arg));
    return reinterpret_cast<const int*>(t.ptr);
  };
  if (o.layout == MoeLayout::contiguous) {
    if (v.has_counts) throw Error("expert_counts", -1, "only the masked layout takes counts; pass expert_offsets");
    if (!v.has_offsets) throw Error("expert_offsets", -1, "is None; the contiguous layout needs int32 offsets [experts + 1]");
    args.expert_offsets = int_vector(v.offsets, "expert_offsets", experts + 1, false);
    if (v.has_gather) {
      // Row r < expert_offsets[E] <= capacity reads gather_index[r].
      args.gather_index = int_vector(v.gather, "gather_index", plan_rows, true);
      args.num_tokens = run.a_rows;
    }
  } else {
    if (v.has_offsets) throw Error("expert_offsets", -1, "the masked layout takes expert_counts, not offsets");
    if (v.has_gather) throw Error("gather_index", -1, "the masked layout does not gather");
    if (!v.has_counts) throw Error("expert_counts", -1, "is None; the masked layout needs int32 counts [experts]");
    args.expert_counts = int_vector(v.counts, "expert_counts", experts, false);
  }

  // out
  const DType want = o.out_type == OutType::f16 ? DType::f16 : o.out_type == OutType::bf16 ? DType::bf16 : DType::f32;
  if (!(v.out.dtype == want || (o.out_type != OutType::f32 && v.out.dtype == DType::raw16)))
    throw Error("out", -1, std::string("has dtype ") + to_string(v.out.dtype) + " but out_dtype is " + to_string(want));
  const Matrix c = read_rows(v.out, "out", o, experts, w.n, "N");
  if (c.rows < plan_rows)
    throw Error("out", -1, "has " + std::to_string(c.rows) + " rows; the plan serves " + std::to_string(plan_rows) +
                               " and a run may write any of them (rows below expert_offsets[E] <= capacity)");
  require_placement(v.out, "out", wr);
  args.c = reinterpret_cast<void*>(v.out.ptr);
  args.ldc = c.ld;
  const std::int64_t esize = static_cast<std::int64_t>(out_type_size(o.out_type));
  const std::int64_t c_bytes = strided_bytes(c.rows, c.ld * esize, w.n * esize);
  check_extent(v.out, "out", c_bytes, "write", " (ldc = " + std::to_string(c.ld) + " elements)");

  // The output may overlap no input (the kernel reads inputs while other CTAs write C).
  inputs.push_back(range_of(wr.w, weight_bytes(w, o), "w"));
  inputs.push_back(range_of(wr.scales, weight_scale_bytes(w, o), "w_scales"));
  if (wr.alpha_array) inputs.push_back(range_of(wr.alpha, 4 * std::int64_t{experts}, "alpha"));
  const ByteRange out_range = range_of(v.out, c_bytes, "out");
  for (const ByteRange& in : inputs)
    if (in.begin < out_range.end && out_range.begin < in.end && in.end > in.begin)
      throw Error("out", -1, "bytes [" + hex(out_range.begin) + ", " + hex(out_range.end) + ") overlap " + in.name +
                                 " [" + hex(in.begin) + ", " + hex(in.end) + "): the output must not overlap an input");
  detail::check_moe_args(w, o, args);
  return run;
}

// The host path: the routing is host data, so its errors are raised at once; then the reference.
void run_host(const MoeWeightsRead& wr, const MoeOptions& o, const MoeRun& run, int threads) {
  const MoeWeights& w = wr.weights;
  const MoeArgs& a = run.args;
  const int num_tokens = a.gather_index != nullptr ? a.num_tokens : run.a_rows;
  detail::check_moe_routing(w.experts, o, a.expert_offsets, a.expert_counts, a.gather_index, num_tokens);
  const std::vector<float> alpha = host_alpha(wr);
  reference::MoeHostProblem p;
  p.experts = w.experts, p.n = w.n, p.k = w.k;
  p.format = o.format;
  p.bf16_activations = o.activation == MoeActivation::bf16;
  p.a = static_cast<const std::uint8_t*>(a.a);
  p.lda = a.lda;
  p.a_scales = static_cast<const std::uint8_t*>(a.a_scales);
  p.a_rows = num_tokens;
  p.w = static_cast<const std::uint8_t*>(w.w);
  p.ldw = w.ldw, p.w_expert_stride = w.expert_stride;
  p.w_scales = static_cast<const std::uint8_t*>(w.scales);
  p.w_layout = o.scale_layout;
  p.w_scale_expert_stride = w.scale_expert_stride;
  p.alpha = alpha.empty() ? nullptr : alpha.data();
  p.offsets = a.expert_offsets;
  p.counts = a.expert_counts;
  p.capacity = o.capacity;
  p.gather = a.gather_index;
  p.c = a.c;
  p.ldc = a.ldc;
  p.out_type = o.out_type;
  // GLU: the kernel's FP32 epilogue (bit for bit the device's where the sums are exact).
  const reference::DualActivation act{o.epilogue == MoeEpilogue::swigluoai ? reference::Activation::swigluoai
                                                                          : reference::Activation::silu,
                                      o.swiglu_alpha, o.swiglu_limit};
  std::vector<float> alpha_up;
  if (o.epilogue != MoeEpilogue::none) {
    p.glu = &act;
    p.glu_fp32 = true;
    p.gate_up = static_cast<int>(o.gate_up);
    if (wr.has_up) {
      p.w_up = static_cast<const std::uint8_t*>(w.w_up);
      p.w_up_scales = static_cast<const std::uint8_t*>(w.scales_up);
    }
    if (wr.alpha_up_array) {
      const auto* q = reinterpret_cast<const float*>(wr.alpha_up.ptr);
      alpha_up.assign(q, q + w.experts);
    } else if (!std::isnan(w.alpha_up)) {
      alpha_up.assign(w.experts, w.alpha_up);
    }
    p.alpha_up = alpha_up.empty() ? nullptr : alpha_up.data();
  }
  nb::gil_scoped_release release;
  reference::moe_gemm(p, threads);
}

// Enqueues one run. A graph captured now keeps using the plan's workspace: pinned, the plan
// outlives the Python object (or cache entry) that made it.
void enqueue(const MoePlanPtr& plan, const MoeArgs& args, cudaStream_t stream, bool capturing) {
  if (capturing) MoeBinding::get().pin(plan);
  plan->run(args, stream);
}

// `plan` as a pointer that also owns a reference to `obj` (released with the GIL held, from
// whichever thread drops the plan last).
MoePlanPtr holding(MoePlanPtr plan, nb::handle obj) {
  struct Holder {
    MoePlanPtr plan;
    PyObject* ref = nullptr;
    ~Holder() {
      if (ref == nullptr || !Py_IsInitialized()) return;
      const PyGILState_STATE g = PyGILState_Ensure();
      Py_DECREF(ref);
      PyGILState_Release(g);
    }
  };
  auto h = std::make_shared<Holder>();
  h->plan = std::move(plan);
  h->ref = obj.inc_ref().ptr();
  const MoeGemm* raw = h->plan.get();
  return MoePlanPtr(std::move(h), raw);
}

MoePlanPtr build_plan(const MoeWeightsRead& wr, const MoeOptions& o, bool capturing, cudaStream_t stream) {
  MoeOptions options = o;
  options.device = wr.device;
  return build_outside_capture(capturing, [&] { return std::make_shared<const MoeGemm>(wr.weights, options, stream); });
}

// Everything a plan is bound to: options, device and the weights' description (pointers, strides,
// alpha), plus the _version of linear torch scales (see read_weights).
std::vector<std::uint64_t> plan_key(const MoeWeightsRead& wr, const MoeOptions& o) {
  const MoeWeights& w = wr.weights;
  return {static_cast<std::uint64_t>(o.format),
          static_cast<std::uint64_t>(o.scale_layout),
          static_cast<std::uint64_t>(o.out_type),
          static_cast<std::uint64_t>(o.activation),
          static_cast<std::uint64_t>(o.layout),
          static_cast<std::uint64_t>(o.capacity),
          static_cast<std::uint64_t>(wr.device + 1),
          static_cast<std::uint64_t>(w.experts),
          static_cast<std::uint64_t>(w.n),
          static_cast<std::uint64_t>(w.k),
          reinterpret_cast<std::uint64_t>(w.w),
          static_cast<std::uint64_t>(w.ldw),
          static_cast<std::uint64_t>(w.expert_stride),
          reinterpret_cast<std::uint64_t>(w.scales),
          static_cast<std::uint64_t>(w.scale_expert_stride),
          reinterpret_cast<std::uint64_t>(w.alpha_device),
          float_bits(w.alpha),
          wr.scales_version};
}

}  // namespace

// ---- MoeGemmObject ------------------------------------------------------------------------------------

MoeGemmObject::MoeGemmObject(nb::handle w, nb::handle w_scales, nb::handle format, nb::handle scale_layout,
                             nb::handle out_dtype, nb::handle activation, nb::handle layout, int capacity,
                             nb::handle alpha, const std::string& epilogue, const std::string& gate_up,
                             nb::handle w_up, nb::handle w_up_scales, nb::handle alpha_up, float swiglu_alpha,
                             float swiglu_limit, bool rescale_each_run) {
  options_ = parse_moe_options(format, scale_layout, out_dtype, parse_moe_activation(activation), layout, capacity);
  if (epilogue == "none") options_.epilogue = MoeEpilogue::none;
  else if (epilogue == "silu") options_.epilogue = MoeEpilogue::silu;
  else if (epilogue == "swigluoai") options_.epilogue = MoeEpilogue::swigluoai;
  else throw Error("epilogue", -1, "'" + epilogue + "' is not one of 'none', 'silu', 'swigluoai'");
  if (gate_up == "stacked") options_.gate_up = GateUpLayout::stacked;
  else if (gate_up == "interleaved") options_.gate_up = GateUpLayout::interleaved;
  else if (gate_up == "separate") options_.gate_up = GateUpLayout::separate;
  else throw Error("gate_up", -1, "'" + gate_up + "' is not one of 'stacked', 'interleaved', 'separate'");
  options_.swiglu_alpha = swiglu_alpha, options_.swiglu_limit = swiglu_limit;
  options_.rescale_each_run = rescale_each_run;
  Binding& bind = Binding::get();
  TensorReader& reader = bind.reader();
  Keepalive keep;
  weights_ = read_weights(reader, w, w_scales, alpha, options_, keep, w_up, w_up_scales, alpha_up);
  options_.device = weights_.device;
  auto keep_alive = [&](nb::handle o, const TensorView& view, const char* name) {
    refs_.append(nb::borrow(o));
    if (!reader.is_torch(o)) return;
    storages_.append(reader.torch_storage(o));
    watched_.emplace_back(o, name);
    states_.add(view);
  };
  keep_alive(w, weights_.w, "w");
  keep_alive(w_scales, weights_.scales, "w_scales");
  // The plan keeps its own copy of linear or GLU scales (unless rescale_each_run remakes it at
  // every run): in-place changes of torch scales are seen by reloading it before the next run.
  const bool copies = (options_.scale_layout == ScaleLayout::linear || options_.epilogue != MoeEpilogue::none) &&
                      !options_.rescale_each_run;
  if (copies && reader.is_torch(w_scales)) copied_.add(w_scales);
  if (copies && weights_.has_up && reader.is_torch(w_up_scales)) copied_.add(w_up_scales);
  if (weights_.alpha_array) keep_alive(alpha, weights_.alpha, "alpha");
  if (weights_.has_up) {
    keep_alive(w_up, weights_.w_up, "w_up");
    keep_alive(w_up_scales, weights_.scales_up, "w_up_scales");
  }
  if (weights_.alpha_up_array) keep_alive(alpha_up, weights_.alpha_up, "alpha_up");
  if (weights_.cuda) {
    const cudaStream_t s = bind.resolve_stream(nb::none(), weights_.framework, weights_.device);
    plan_ = build_plan(weights_, options_, Binding::is_capturing(s), s);
  }
}

int MoeGemmObject::rows() const { return static_cast<int>(detail::moe_rows(weights_.weights.experts, options_)); }

void MoeGemmObject::run(nb::handle a, nb::handle a_scales, nb::handle expert_offsets, nb::handle expert_counts,
                        nb::handle gather_index, nb::handle out, nb::handle stream, int threads) {
  TensorReader& reader = Binding::get().reader();
  for (std::size_t j = 0; j < watched_.size(); ++j)
    if (!states_.unchanged(reader, j, watched_[j].first))
      throw Error(watched_[j].second, -1,
                  "changed since this MoeGemm was built: its data_ptr(), shape, strides or dtype differ (set_(), "
                  "resize_(), .data = ...). The plan is bound to the old memory and layout; build a new MoeGemm");
  Keepalive keep;
  const MoeRunViews views = read_run_views(reader, a, a_scales, expert_offsets, expert_counts, gather_index, out, keep);
  const MoeRun run = check_run(views, weights_, options_);
  if (!plan_) {
    run_host(weights_, options_, run, threads);
    return;
  }
  const cudaStream_t s = Binding::get().resolve_stream(stream, views.a.framework, weights_.device);
  reload_if_changed(s);
  enqueue(plan_, run.args, s, Binding::is_capturing(s));
}

void MoeGemmObject::reload_if_changed(cudaStream_t stream) {
  if (plan_ && copied_.changed()) copied_.recopy([&] { plan_->reload_scales(stream); });
}

void MoeGemmObject::reload_weights(nb::handle stream) {
  if (!plan_) return;  // the host path reads the arrays at every run
  const cudaStream_t s = Binding::get().resolve_stream(stream, weights_.framework, weights_.device);
  copied_.recopy([&] { plan_->reload_scales(s); });
}

void MoeGemmObject::check(nb::handle stream) const {
  if (!plan_) return;  // the host path raises at once
  const cudaStream_t s = Binding::get().resolve_stream(stream, weights_.framework, weights_.device);
  nb::gil_scoped_release release;
  plan_->check(s);
}

std::string MoeGemmObject::describe() const {
  if (plan_) return plan_->describe();
  const MoeWeights& w = weights_.weights;
  return "CPU reference (host arrays): " + std::to_string(w.experts) + " experts, N " + std::to_string(w.n) + ", K " +
         std::to_string(w.k) + ", " + to_string(options_.format) + " weights x " +
         (options_.activation == MoeActivation::fp4 ? to_string(options_.format) : "bf16") + " activations -> " +
         to_string(options_.out_type) + ", " + to_string(options_.layout) + " rows " + std::to_string(rows());
}

// ---- MoeBinding -------------------------------------------------------------------------------------

MoeBinding& MoeBinding::get() {
  static MoeBinding* b = new MoeBinding();  // leaked on purpose, as Binding
  return *b;
}

MoeBinding::MoeBinding() : plans_(64, Binding::kDefaultMaxBytes) {}

namespace {

// moe_grouped_gemm's options from its run arrays: the activation follows a's dtype unless given,
// the capacity is what this call routes (gather_index's length, else the rows of a). nullopt when
// nothing is routed (0 rows: `out` must be [0, N] and there is nothing to compute).
std::optional<MoeOptions> call_options(const MoeRunViews& views, nb::handle format, nb::handle scale_layout,
                                       nb::handle out_dtype, nb::handle activation) {
  MoeActivation act = MoeActivation::fp4;
  if (!activation.is_none()) {
    act = parse_moe_activation(activation);
  } else if (views.a.dtype == DType::bf16) {
    act = MoeActivation::bf16;
  } else if (views.a.dtype == DType::raw16) {
    throw Error("a", -1, "holds raw 16-bit values: pass activation='bf16' (W4A16) to read them as bfloat16");
  }
  if (views.a.ndim < 1) throw Error("a", -1, "must be 2-D [rows, K/2] (FP4) or [rows, K] (bf16), got a scalar");
  const std::int64_t rows = views.has_gather ? (views.gather.ndim == 1 ? views.gather.shape[0] : -1) : views.a.shape[0];
  if (rows < 0) throw Error("gather_index", -1, "must be 1-D, got shape " + views.gather.shape_text());
  if (rows > INT32_MAX) throw Error(views.has_gather ? "gather_index" : "a", -1, "more than 2^31 - 1 rows");
  if (rows == 0) {
    if (views.out.ndim != 2 || views.out.shape[0] != 0)
      throw Error("out", -1, "has shape " + views.out.shape_text() + "; expected [0, N] (no rows are routed)");
    return std::nullopt;
  }
  return parse_moe_options(format, scale_layout, out_dtype, act, nb::str("contiguous"), static_cast<int>(rows));
}

}  // namespace

void MoeBinding::grouped_gemm(nb::handle a, nb::handle a_scales, nb::handle w, nb::handle w_scales,
                              nb::handle expert_offsets, nb::handle gather_index, nb::handle out, nb::handle alpha,
                              nb::handle format, nb::handle scale_layout, nb::handle out_dtype, nb::handle activation,
                              nb::handle stream, int threads) {
  TensorReader& reader = Binding::get().reader();
  Keepalive keep;
  const MoeRunViews views =
      read_run_views(reader, a, a_scales, expert_offsets, nb::none(), gather_index, out, keep);
  const std::optional<MoeOptions> options = call_options(views, format, scale_layout, out_dtype, activation);
  if (!options) return;
  const MoeWeightsRead wr = read_weights(reader, w, w_scales, alpha, *options, keep);
  if (!wr.cuda) {
    const MoeRun run = check_run(views, wr, *options);
    run_host(wr, *options, run, threads);
    return;
  }
  // A plan for linear scales holds its own blocked copy of them, and the cache finds plans by the
  // arrays' addresses (and the scales' _version): the plan holds the scales' storage, so that no
  // other array can be handed that address while the plan is cached (it would be served the old
  // copy). Blocked scales are read at every run: any array at the address is served right.
  nb::object held;
  if (options->scale_layout == ScaleLayout::linear)
    held = reader.is_torch(w_scales) ? reader.torch_storage(w_scales) : nb::borrow(w_scales);
  run_on_device(views, wr, *options, Binding::get().resolve_stream(stream, views.a.framework, wr.device), nullptr, held);
}

namespace {

bool same_alpha(const MoeAlphaArg& x, const MoeAlphaArg& y) {
  if (x.given != y.given || x.is_array != y.is_array) return false;
  if (x.is_array) return same_view(x.view, y.view);
  return std::memcmp(&x.scalar, &y.scalar, sizeof x.scalar) == 0;
}

bool same_run_views(const MoeRunViews& x, const MoeRunViews& y) {
  return x.has_a_scales == y.has_a_scales && x.has_offsets == y.has_offsets && x.has_counts == y.has_counts &&
         x.has_gather == y.has_gather && same_view(x.a, y.a) && same_view(x.out, y.out) &&
         (!x.has_a_scales || same_view(x.a_scales, y.a_scales)) && (!x.has_offsets || same_view(x.offsets, y.offsets)) &&
         (!x.has_counts || same_view(x.counts, y.counts)) && (!x.has_gather || same_view(x.gather, y.gather));
}

nb::object str_or_none(std::string_view s) {
  return s.empty() ? nb::object(nb::none()) : nb::object(nb::str(s.data(), s.size()));
}

}  // namespace

void MoeBinding::grouped_gemm_views(const MoeViewsCall& call, cudaStream_t stream) {
  const std::optional<MoeOptions> options =
      call_options(call.views, str_or_none(call.format), nb::str(call.scale_layout.data(), call.scale_layout.size()),
                   nb::str(call.out_dtype.data(), call.out_dtype.size()), nb::none());
  if (!options) return;
  const MoeWeightsRead wr = moe_weights_from_views(call.w, call.w_scales, call.alpha, *options);
  if (!wr.cuda) throw Error("w", -1, "is on the CPU; this path runs CUDA weights");
  MoeArgs args;
  const MoePlanPtr plan = run_on_device(call.views, wr, *options, stream, &args);
  if (options->scale_layout != ScaleLayout::blocked) return;  // linear: the plan depends on their _version too
  std::lock_guard lock(mutex_);
  memo_.views = call.views;
  memo_.w = call.w, memo_.w_scales = call.w_scales;
  memo_.alpha = call.alpha;
  memo_.format = call.format, memo_.scale_layout = call.scale_layout, memo_.out_dtype = call.out_dtype;
  memo_.plan = plan;
  memo_.args = args;
}

bool MoeBinding::replay_views(const MoeViewsCall& call, cudaStream_t stream) {
  MoePlanPtr plan;
  MoeArgs args;
  {
    std::lock_guard lock(mutex_);
    const ViewsMemo& m = memo_;
    if (!m.plan || !same_run_views(call.views, m.views) || !same_view(call.w, m.w) ||
        !same_view(call.w_scales, m.w_scales) || !same_alpha(call.alpha, m.alpha) || call.format != m.format ||
        call.scale_layout != m.scale_layout || call.out_dtype != m.out_dtype)
      return false;
    plan = m.plan;
    args = m.args;
    if (!plans_.touch(plan)) return false;  // (keeps the plan's place in the LRU order)
    ++hits_;
    ++memo_hits_;
  }
  enqueue(plan, args, stream, Binding::is_capturing(stream));
  return true;
}

void MoeBinding::forget_memo(std::vector<MoePlanPtr>& release) {
  if (memo_.plan) release.push_back(std::move(memo_.plan));
  memo_ = ViewsMemo{};
}

MoePlanPtr MoeBinding::run_on_device(const MoeRunViews& views, const MoeWeightsRead& wr, const MoeOptions& options,
                                     cudaStream_t s, MoeArgs* args, nb::handle keep) {
  const MoeRun run = check_run(views, wr, options);
  if (args != nullptr) *args = run.args;
  const std::vector<std::uint64_t> key = plan_key(wr, options);
  const std::uint64_t h = hash_words(key);
  MoePlanPtr plan;
  {
    std::lock_guard lock(mutex_);
    plan = plans_.find(key, h);
    ++(plan ? hits_ : misses_);
  }
  const bool capturing = Binding::is_capturing(s);
  if (!plan) {
    MoePlanPtr built = build_plan(wr, options, capturing, s);  // releases the GIL
    if (keep.is_valid()) built = holding(std::move(built), keep);
    std::vector<MoePlanPtr> evicted;                         // destroyed after the lock is released
    std::lock_guard lock(mutex_);
    plan = plans_.insert(key, h, std::move(built), /*may_evict=*/!capturing, evicted);
    if (!evicted.empty()) forget_memo(evicted);
  }
  enqueue(plan, run.args, s, capturing);
  return plan;
}

void MoeBinding::pin(const MoePlanPtr& plan) {
  std::lock_guard lock(mutex_);
  plans_.pin(plan);
}

void MoeBinding::check(nb::handle stream) {
  std::vector<MoePlanPtr> plans;
  {
    std::lock_guard lock(mutex_);
    plans = plans_.all();
  }
  Binding& bind = Binding::get();
  for (const MoePlanPtr& p : plans) {
    const cudaStream_t s = bind.resolve_stream(stream, Framework::torch, p->options().device);
    nb::gil_scoped_release release;
    p->check(s);
  }
}

CacheStats MoeBinding::stats() const {
  std::lock_guard lock(mutex_);
  CacheStats s;
  s.plans = plans_.size();
  s.pinned = plans_.pinned();
  s.capacity = plans_.capacity();
  s.bytes = plans_.bytes();
  s.max_bytes = plans_.max_bytes();
  s.hits = hits_;
  s.misses = misses_;
  s.memo_hits = memo_hits_;
  return s;
}

void MoeBinding::clear_cache(bool pinned) {
  std::vector<MoePlanPtr> evicted;
  std::lock_guard lock(mutex_);
  plans_.clear(pinned, evicted);
  forget_memo(evicted);
  hits_ = misses_ = memo_hits_ = 0;
}

void MoeBinding::set_capacity(std::size_t capacity) {
  std::vector<MoePlanPtr> evicted;
  std::lock_guard lock(mutex_);
  plans_.set_limits(capacity, plans_.max_bytes(), evicted);
  forget_memo(evicted);
}

void MoeBinding::set_max_bytes(std::size_t max_bytes) {
  std::vector<MoePlanPtr> evicted;
  std::lock_guard lock(mutex_);
  plans_.set_limits(plans_.capacity(), max_bytes, evicted);
  forget_memo(evicted);
}

}  // namespace fp4gemm::python
