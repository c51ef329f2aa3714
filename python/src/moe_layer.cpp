// fp4gemm.moe.MoeLayer for Python: the whole expert layer (fp4gemm::MoeLayer) over DLPack arrays;
// host (NumPy) arrays run reference::moe_layer after the same checks.
#include "moe_layer.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "checks.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/quantize.hpp"
#include "fp4gemm/reference.hpp"
#include "grouped.hpp"
#include "host/core/moe_validate.hpp"
#include "torch_native.hpp"

namespace fp4gemm::python {

namespace {

[[noreturn]] void fail(const std::string& arg, const std::string& message) { throw Error(arg, -1, message); }

std::string shape3(std::int64_t a, std::int64_t b, std::int64_t c) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + "]";
}

// Packed e2m1 weights [E, rows, cols/2], dense.
void check_weight(const TensorView& t, const char* arg, std::int64_t e, std::int64_t rows, std::int64_t k) {
  if (t.dtype != DType::byte && t.dtype != DType::fp4x2)
    fail(arg, std::string("has dtype ") + to_string(t.dtype) + "; packed FP4 weights must be uint8 (or float4_e2m1fn_x2)");
  if (t.ndim != 3 || t.shape[0] != e || t.shape[1] != rows || t.shape[2] != k / 2)
    fail(arg, "has shape " + t.shape_text() + "; expected " + shape3(e, rows, k / 2));
  if (!is_row_major_dense(t)) fail(arg, "must be dense and row-major, got strides " + t.strides_text());
}

// Scales of [E, rows, k] weights: linear [E, rows, k/vec] or blocked [E, bytes] / [E, pad128(rows),
// pad4(k/vec)], dense.
void check_scales(const TensorView& t, const char* arg, std::int64_t e, std::int64_t rows, std::int64_t k,
                  const MoeLayerOptions& o) {
  check_scale_dtype(t, arg, -1, o.format);
  const std::int64_t cols = k / scale_block_size(o.format);
  const std::int64_t blocked = static_cast<std::int64_t>(formats::blocked_scale_bytes(rows, cols));
  const bool ok = o.scale_layout == ScaleLayout::linear
                      ? t.ndim == 3 && t.shape[0] == e && t.shape[1] == rows && t.shape[2] == cols
                      : t.ndim >= 2 && t.shape[0] == e && t.numel() == e * blocked;
  if (!ok)
    fail(arg, "has shape " + t.shape_text() + "; expected " +
                  (o.scale_layout == ScaleLayout::linear
                       ? shape3(e, rows, cols) + " (linear)"
                       : "[" + std::to_string(e) + ", " + std::to_string(blocked) + "] (blocked: " +
                             std::to_string(formats::padded_rows(rows)) + " x " +
                             std::to_string(formats::padded_scale_cols(cols)) + " per expert)"));
  if (!is_row_major_dense(t)) fail(arg, "must be dense and row-major, got strides " + t.strides_text());
}

}  // namespace

MoeLayerObject::MoeLayerObject(nb::handle w13, nb::handle w13_scales, nb::handle w2, nb::handle w2_scales,
                               nb::handle w13_alpha, nb::handle w13_alpha_up, nb::handle w2_alpha,
                               const MoeLayerOptions& options, nb::handle w13_bias, nb::handle w2_bias) {
  options_ = options;
  Binding& bind = Binding::get();
  TensorReader& reader = bind.reader();
  Keepalive keep;
  const TensorView v13 = reader.read(w13, "w13", -1, false, keep);
  const TensorView v13s = reader.read(w13_scales, "w13_scales", -1, false, keep);
  const TensorView v2 = reader.read(w2, "w2", -1, false, keep);
  const TensorView v2s = reader.read(w2_scales, "w2_scales", -1, false, keep);
  MoeLayerWeights& w = weights_;
  if (options_.weight_layout == WeightLayout::pieces) {
    // pack_pieces' output: w13 [E, 2I / 16, ceil(H / 128), 1024], w2 [E, H / 16, ceil(I / 128), 1024] uint8
    if (v13.ndim != 4 || v2.ndim != 4 || v13.shape[3] != 1024 || v2.shape[3] != 1024)
      fail(v13.ndim != 4 || v13.shape[3] != 1024 ? "w13" : "w2",
           "weights in pieces are 4-D [experts, rows / 16, ceil(k / 128), 1024] (fp4gemm.pack_pieces), got shapes " +
               v13.shape_text() + " and " + v2.shape_text());
    w.experts = static_cast<int>(v13.shape[0]);
    w.hidden = static_cast<int>(16 * v2.shape[1]);
    w.inter = static_cast<int>(8 * v13.shape[1]);
    for (const auto& [v, name, k] : {std::tuple{&v13, "w13", std::int64_t{w.hidden}}, std::tuple{&v2, "w2", std::int64_t{w.inter}}}) {
      if (v->dtype != DType::byte) fail(name, "weights in pieces are uint8, got " + std::string(to_string(v->dtype)));
      if (v->shape[0] != w.experts || v->shape[2] != (k + 127) / 128)
        fail(name, "has shape " + v->shape_text() + "; hidden " + std::to_string(w.hidden) + " (from w2) and inter " +
                       std::to_string(w.inter) + " (from w13) need [" + std::to_string(w.experts) + ", " +
                       std::to_string(v->shape[1]) + ", " + std::to_string((k + 127) / 128) + ", 1024]");
      if (!is_row_major_dense(*v)) fail(name, "must be dense and row-major, got strides " + v->strides_text());
      if (!v->cuda) fail(name, "weights in pieces run on the GPU only (a CUDA array)");
    }
  } else {
    if (v13.ndim != 3) fail("w13", "must be 3-D [experts, 2 * inter, hidden / 2], got shape " + v13.shape_text());
    if (v2.ndim != 3) fail("w2", "must be 3-D [experts, hidden, inter / 2], got shape " + v2.shape_text());
    w.experts = static_cast<int>(v13.shape[0]);
    w.hidden = static_cast<int>(2 * v13.shape[2]);
    w.inter = static_cast<int>(v13.shape[1] / 2);
    if (v13.shape[1] % 2 != 0) fail("w13", "has " + std::to_string(v13.shape[1]) + " rows per expert; gate and up need 2 * inter");
    check_weight(v13, "w13", w.experts, 2 * std::int64_t{w.inter}, w.hidden);
    check_weight(v2, "w2", w.experts, w.hidden, 2 * v2.shape[2]);
    if (2 * v2.shape[2] != w.inter)
      fail("w2", "has shape " + v2.shape_text() + "; expected " + shape3(w.experts, w.hidden, w.inter / 2) +
                     " (inter from w13: " + std::to_string(w.inter) + ")");
  }
  check_scales(v13s, "w13_scales", w.experts, 2 * std::int64_t{w.inter}, w.hidden, options_);
  check_scales(v2s, "w2_scales", w.experts, w.hidden, w.inter, options_);
  cuda_ = v13.cuda;
  device_ = v13.device;
  framework_ = v13.framework;
  for (const auto& [v, name] : {std::pair{&v13s, "w13_scales"}, std::pair{&v2, "w2"}, std::pair{&v2s, "w2_scales"}})
    if (v->cuda != cuda_ || (cuda_ && v->device != device_))
      fail(name, "is on " + v->device_text() + " but w13 is on " + v13.device_text() +
                     "; all arrays of a layer must live on one device");
  w.w13 = reinterpret_cast<const void*>(v13.ptr), w.w13_scales = reinterpret_cast<const void*>(v13s.ptr);
  w.w2 = reinterpret_cast<const void*>(v2.ptr), w.w2_scales = reinterpret_cast<const void*>(v2s.ptr);
  // What the layer reads is kept alive (torch: the storage too, so that set_() or .data = ...
  // cannot free it); torch arrays are watched for such changes (refused at run time), and the
  // scales and alphas, which the layer copies, for in-place changes (copies made again).
  auto keep_alive = [&](nb::handle o, const TensorView& view, const char* name, bool copied) {
    refs_.append(nb::borrow(o));
    if (!reader.is_torch(o)) return;
    storages_.append(reader.torch_storage(o));
    watched_.emplace_back(o, name);
    states_.add(view);
    seen_.push_back(Seen{torch_version(o).value_or(0), view.ptr});
    if (copied) copied_.add(o);
  };
  const float** alpha_slots[3] = {&w.w13_alpha, &w.w13_alpha_up, &w.w2_alpha};
  const char* alpha_names[3] = {"w13_alpha", "w13_alpha_up", "w2_alpha"};
  nb::handle alphas[3] = {w13_alpha, w13_alpha_up, w2_alpha};
  for (int i = 0; i < 3; ++i) {
    if (alphas[i].is_none()) continue;
    const TensorView a = reader.read(alphas[i], alpha_names[i], -1, false, keep);
    if (a.dtype != DType::f32 || a.ndim != 1 || a.shape[0] != w.experts || (w.experts > 1 && a.strides[0] != 1))
      fail(alpha_names[i], "must be a float32 array of one value per expert [" + std::to_string(w.experts) +
                               "] with unit stride, got " + to_string(a.dtype) + " of shape " + a.shape_text());
    if (a.cuda != cuda_ || (cuda_ && a.device != device_))
      fail(alpha_names[i], "is on " + a.device_text() + " but w13 is on " + v13.device_text());
    *alpha_slots[i] = reinterpret_cast<const float*>(a.ptr);
    keep_alive(alphas[i], a, alpha_names[i], true);
  }
  // Biases (gpt-oss): bf16 or float32, [E, 2I] and [E, H], both of one dtype; read at every run.
  {
    const std::int64_t cols[2] = {2 * std::int64_t{w.inter}, w.hidden};
    const char* names[2] = {"w13_bias", "w2_bias"};
    nb::handle biases[2] = {w13_bias, w2_bias};
    const void** slots[2] = {&w.w13_bias, &w.w2_bias};
    int dtype = -1;  // 0 bf16, 1 f32
    for (int i = 0; i < 2; ++i) {
      if (biases[i].is_none()) continue;
      const TensorView b = reader.read(biases[i], names[i], -1, false, keep);
      const bool contiguous = b.ndim == 2 && (b.shape[1] == 1 || b.strides[1] == 1) &&
                              (b.shape[0] == 1 || b.strides[0] == cols[i]);
      if ((b.dtype != DType::bf16 && b.dtype != DType::f32) || b.ndim != 2 || b.shape[0] != w.experts ||
          b.shape[1] != cols[i] || !contiguous)
        fail(names[i], "must be a contiguous bfloat16 or float32 array [" + std::to_string(w.experts) + ", " +
                           std::to_string(cols[i]) + "], got " + to_string(b.dtype) + " of shape " + b.shape_text());
      const int d = b.dtype == DType::f32 ? 1 : 0;
      if (dtype >= 0 && d != dtype) fail(names[i], "must have the dtype of w13_bias");
      dtype = d;
      if (b.cuda != cuda_ || (cuda_ && b.device != device_))
        fail(names[i], "is on " + b.device_text() + " but w13 is on " + v13.device_text());
      *slots[i] = reinterpret_cast<const void*>(b.ptr);
      keep_alive(biases[i], b, names[i], false);
    }
    w.bias_f32 = dtype == 1;
  }
  keep_alive(w13, v13, "w13", false);
  keep_alive(w13_scales, v13s, "w13_scales", true);
  keep_alive(w2, v2, "w2", false);
  keep_alive(w2_scales, v2s, "w2_scales", true);
  detail::validate_moe_layer(w, options_);
  if (cuda_) {
    options_.device = device_;
    const cudaStream_t s = bind.resolve_stream(nb::none(), v13.framework, device_);
    // (plan-time reads of the weights wait for this stream's work: they may have just been written
    // there, e.g. by fp4gemm.quantize)
    layer_ = build_outside_capture(Binding::is_capturing(s), [&] { return std::make_shared<const MoeLayer>(w, options_, s); });
    return;
  }
  // Host: the reference's linear scale copies are made at every run (the arrays may change in place).
}

void MoeLayerObject::check_weights(cudaStream_t stream) const {
  TensorReader& reader = Binding::get().reader();
  bool moved = false;
  for (std::size_t j = 0; j < watched_.size() && !moved; ++j)
    moved = torch_version(watched_[j].first).value_or(0) != seen_[j].version ||
            reader.torch_data_ptr(watched_[j].first) != seen_[j].ptr;
  if (!moved) return;
  for (std::size_t j = 0; j < watched_.size(); ++j)
    if (!states_.unchanged(reader, j, watched_[j].first))
      throw Error(watched_[j].second, -1,
                  "changed since this MoeLayer was built: its data_ptr(), shape, strides or dtype differ (set_(), "
                  "resize_(), .data = ...). The layer is bound to the old memory and layout; build a new MoeLayer "
                  "(in-place changes of the values, e.g. copy_(), are seen)");
  if (layer_ && copied_.changed()) reload_on(stream);
  for (std::size_t j = 0; j < watched_.size(); ++j)
    seen_[j].version = torch_version(watched_[j].first).value_or(0);  // (the state is unchanged: so is data_ptr)
}

void MoeLayerObject::reload_on(cudaStream_t stream) const {
  copied_.recopy([&] { layer_->reload_weights(stream); });
}

void MoeLayerObject::reload_weights(nb::handle stream) {
  if (!layer_) return;  // the host path reads the arrays at every run
  const cudaStream_t s = Binding::get().resolve_stream(stream, framework_, device_);
  check_weights(s);  // (may reload already)
  reload_on(s);
}

// The tokens are bf16 hidden_states [T, H], or (W4A4) hidden_packed [T, H/2] uint8 with linear
// hidden_scales [T, H/vec], dense: the tokens as step 2 would quantise them.
void MoeLayerObject::run(nb::handle hidden, nb::handle topk_ids, nb::handle topk_weights, nb::handle out,
                         nb::handle stream, int threads, nb::handle hidden_packed, nb::handle hidden_scales,
                         nb::handle token_count, nb::handle expert_rows, nb::handle row_of) {
  TensorReader& reader = Binding::get().reader();
  Keepalive keep;
  TensorView x, xs;
  const bool pre = !hidden_packed.is_none() || !hidden_scales.is_none();
  if (pre) {
    if (!hidden.is_none()) fail("hidden_states", "pass either hidden_states or hidden_packed / hidden_scales, not both");
    if (options_.activations != MoeActivation::fp4)
      fail("hidden_packed", "pre-quantised tokens need FP4 activations (act_format nvfp4 / mxfp4)");
    if (hidden_packed.is_none() || hidden_scales.is_none())
      fail(hidden_packed.is_none() ? "hidden_packed" : "hidden_scales", "pre-quantised tokens need both arrays");
    x = reader.read(hidden_packed, "hidden_packed", -1, false, keep, false);
    xs = reader.read(hidden_scales, "hidden_scales", -1, false, keep, false);
  } else {
    x = reader.read(hidden, "hidden_states", -1, false, keep, false);
  }
  const TensorView ids = reader.read(topk_ids, "topk_ids", -1, false, keep, false);
  const TensorView wt = reader.read(topk_weights, "topk_weights", -1, false, keep, false);
  const bool uncombined = !expert_rows.is_none() || !row_of.is_none();
  TensorView y;
  if (uncombined) {
    if (!out.is_none()) fail("out", "pass either out or expert_rows / row_of (the run then stops before its combine)");
    if (expert_rows.is_none() || row_of.is_none())
      fail(expert_rows.is_none() ? "expert_rows" : "row_of", "the run stops before its combine only with both arrays");
  } else {
    y = reader.read(out, "out", -1, true, keep, false);
  }
  MoeLayerArgs a = checked_args(x, pre ? &xs : nullptr, ids, wt, uncombined ? nullptr : &y);
  if (uncombined) {
    if (!layer_) fail("expert_rows", "needs the layer's weights on a CUDA device (the host path always combines)");
    const TensorView er = reader.read(expert_rows, "expert_rows", -1, true, keep, false);
    const TensorView ro = reader.read(row_of, "row_of", -1, true, keep, false);
    const std::int64_t pairs = std::int64_t{a.tokens} * options_.topk;
    if (!er.cuda || er.device != device_) fail("expert_rows", "is on " + er.device_text() + "; the layer is on cuda:" + std::to_string(device_));
    if (!ro.cuda || ro.device != device_) fail("row_of", "is on " + ro.device_text() + "; the layer is on cuda:" + std::to_string(device_));
    if ((er.dtype != DType::bf16 && er.dtype != DType::raw16) || er.ndim != 2 || er.shape[0] != pairs ||
        er.shape[1] != weights_.hidden || !is_row_major_dense(er))
      fail("expert_rows", "must be a dense bfloat16 [T * topk, H] = [" + std::to_string(pairs) + ", " +
                              std::to_string(weights_.hidden) + "] array, got " + to_string(er.dtype) + " " + er.shape_text());
    if (ro.dtype != DType::i32 || ro.ndim != 1 || ro.shape[0] != pairs || !is_row_major_dense(ro))
      fail("row_of", "must be a dense int32 [T * topk] = [" + std::to_string(pairs) + "] array, got " +
                         to_string(ro.dtype) + " " + ro.shape_text());
    a.out = nullptr;
    a.expert_rows = reinterpret_cast<void*>(er.ptr), a.row_of = reinterpret_cast<int*>(ro.ptr);
    detail::check_moe_layer_args(weights_, options_, a);
  }
  if (!token_count.is_none()) {
    const TensorView c = reader.read(token_count, "token_count", -1, false, keep, false);
    if (!layer_ || c.device != device_)
      fail("token_count", "must be a CUDA array on the layer's device (a device-side token count)");
    if (c.dtype != DType::i32 || c.ndim != 1 || c.shape[0] < 1)
      fail("token_count", "must be an int32 array of at least one element, got shape " + c.shape_text());
    a.token_count = reinterpret_cast<const int*>(c.ptr);
  }
  if (layer_) {
    const cudaStream_t s = Binding::get().resolve_stream(stream, x.framework, device_);
    check_weights(s);
    layer_->run(a, s);
    return;
  }
  check_weights(nullptr);  // (host: only the watched state)
  run_host(a, ids, wt, pre ? nullptr : reinterpret_cast<const std::uint16_t*>(x.ptr),
           pre ? reinterpret_cast<const std::uint8_t*>(x.ptr) : nullptr,
           pre ? reinterpret_cast<const std::uint8_t*>(xs.ptr) : nullptr, threads);
}

void MoeLayerObject::run_on_stream(const TensorView& hidden, const TensorView& topk_ids,
                                   const TensorView& topk_weights, const TensorView& out, cudaStream_t stream) const {
  if (!layer_) fail("hidden_states", "this layer's weights are host arrays; run it through fp4gemm.moe");
  const MoeLayerArgs a = checked_args(hidden, nullptr, topk_ids, topk_weights, &out);
  check_weights(stream);  // (the caller holds the GIL)
  layer_->run(a, stream);
}

// The run's arrays checked against the layer (as read: placement, dtypes, shapes, strides).
// `scales` non-null: `x` is hidden_packed with these linear scales (pre-quantised tokens).
MoeLayerArgs MoeLayerObject::checked_args(const TensorView& x, const TensorView* scales, const TensorView& ids,
                                          const TensorView& wt, const TensorView* out) const {
  const MoeLayerWeights& w = weights_;
  const int k = options_.topk, vec = scale_block_size(options_.format);
  auto placed = [&](const TensorView& v, const char* name) {
    if (v.cuda != cuda_ || (cuda_ && v.device != device_))
      fail(name, "is on " + v.device_text() + " but the layer's weights are on " +
                     (cuda_ ? "cuda:" + std::to_string(device_) : std::string("cpu")));
  };
  MoeLayerArgs a;
  const char* tokens_arg = scales ? "hidden_packed" : "hidden_states";
  placed(x, tokens_arg);
  if (scales) {
    const TensorView& xs = *scales;
    placed(xs, "hidden_scales");
    if ((x.dtype != DType::byte && x.dtype != DType::fp4x2) || x.ndim != 2 || x.shape[1] != w.hidden / 2 ||
        !is_row_major_dense(x))
      fail("hidden_packed", "must be a dense uint8 [T, H/2] = [T, " + std::to_string(w.hidden / 2) + "] array, got " +
                                to_string(x.dtype) + " of shape " + x.shape_text());
    check_scale_dtype(xs, "hidden_scales", -1, options_.format);
    if (xs.ndim != 2 || xs.shape[0] != x.shape[0] || xs.shape[1] != w.hidden / vec || !is_row_major_dense(xs))
      fail("hidden_scales", "must be dense linear scales [T, H/" + std::to_string(vec) + "] = [" +
                                std::to_string(x.shape[0]) + ", " + std::to_string(w.hidden / vec) + "], got shape " +
                                xs.shape_text());
    a.hidden_packed = reinterpret_cast<const void*>(x.ptr), a.hidden_scales = reinterpret_cast<const void*>(xs.ptr);
  } else {
    if (x.dtype != DType::bf16 && x.dtype != DType::raw16)
      fail("hidden_states", std::string("has dtype ") + to_string(x.dtype) + "; expected bfloat16");
    if (x.ndim != 2 || x.shape[1] != w.hidden)
      fail("hidden_states", "has shape " + x.shape_text() + "; expected [T, " + std::to_string(w.hidden) + "]");
    // (an empty array's strides say nothing: NumPy 2 gives (0, 0))
    if (x.strides[1] != 1 && w.hidden > 1 && x.shape[0] > 0)
      fail("hidden_states", "must be contiguous along the hidden dimension");
    a.hidden = reinterpret_cast<const void*>(x.ptr), a.ld_hidden = x.shape[0] > 1 ? x.strides[0] : w.hidden;
  }
  const std::int64_t T = x.shape[0];
  placed(ids, "topk_ids");
  placed(wt, "topk_weights");
  if (out != nullptr) placed(*out, "out");
  const bool ids64 = ids.dtype == DType::i64;
  if (ids.dtype != DType::i32 && !ids64)
    fail("topk_ids", std::string("has dtype ") + to_string(ids.dtype) + "; expected int32 or int64");
  if (ids.ndim != 2 || ids.shape[0] != T || ids.shape[1] != k || !is_row_major_dense(ids))
    fail("topk_ids", "must be a dense [T, topk] = [" + std::to_string(T) + ", " + std::to_string(k) +
                         "] array, got shape " + ids.shape_text() + " strides " + ids.strides_text());
  const bool wbf16 = wt.dtype == DType::bf16;
  if (wt.dtype != DType::f32 && !wbf16)
    fail("topk_weights", std::string("has dtype ") + to_string(wt.dtype) + "; expected float32 or bfloat16");
  if (wt.ndim != 2 || wt.shape[0] != T || wt.shape[1] != k || !is_row_major_dense(wt))
    fail("topk_weights", "must be a dense [T, topk] = [" + std::to_string(T) + ", " + std::to_string(k) +
                             "] array, got shape " + wt.shape_text());
  if (out != nullptr) {
    const TensorView& y = *out;
    if (y.dtype != DType::bf16 && y.dtype != DType::raw16)
      fail("out", std::string("has dtype ") + to_string(y.dtype) + "; expected bfloat16");
    if (y.ndim != 2 || y.shape[0] != T || y.shape[1] != w.hidden || (w.hidden > 1 && T > 0 && y.strides[1] != 1))
      fail("out", "has shape " + y.shape_text() + "; expected [T, " + std::to_string(w.hidden) + "], contiguous rows");
  }
  if (T > options_.max_tokens)
    fail(tokens_arg, std::to_string(T) + " tokens; this layer was planned for at most " +
                         std::to_string(options_.max_tokens) + " (max_tokens)");
  a.topk_ids = reinterpret_cast<const void*>(ids.ptr), a.ids_int64 = ids64;
  a.topk_weights = reinterpret_cast<const void*>(wt.ptr), a.weights_bf16 = wbf16;
  a.tokens = static_cast<int>(T);
  if (out == nullptr) return a;  // (the caller adds expert_rows / row_of and checks)
  a.out = reinterpret_cast<void*>(out->ptr), a.ld_out = T > 1 ? out->strides[0] : w.hidden;
  detail::check_moe_layer_args(w, options_, a);
  return a;
}

// The host path: reference::moe_layer on the run's arrays (bf16 tokens, or pre-quantised ones).
void MoeLayerObject::run_host(const MoeLayerArgs& a, const TensorView& ids, const TensorView& wt,
                              const std::uint16_t* x, const std::uint8_t* x_packed, const std::uint8_t* x_scales,
                              int threads) {
  const MoeLayerWeights& w = weights_;
  const int k = options_.topk;
  const std::int64_t T = a.tokens, n = T * k;
  // Linear scales for the reference, from the arrays as they are now (blocked ones converted per expert).
  auto linear = [&](const void* v, std::int64_t rows, std::int64_t kk, std::vector<std::uint8_t>& out) {
    const std::int64_t cols = kk / scale_block_size(options_.format);
    out.resize(static_cast<std::size_t>(w.experts * rows * cols));
    const auto* src = static_cast<const std::uint8_t*>(v);
    if (options_.scale_layout == ScaleLayout::linear) {
      std::memcpy(out.data(), src, out.size());
    } else {
      const std::size_t blocked = formats::blocked_scale_bytes(rows, cols);
      for (int e = 0; e < w.experts; ++e)
        formats::blocked_to_linear(src + e * blocked, rows, cols, out.data() + static_cast<std::size_t>(e) * rows * cols);
    }
  };
  linear(w.w13_scales, 2 * std::int64_t{w.inter}, w.hidden, host_w13_scales_);
  linear(w.w2_scales, w.hidden, w.inter, host_w2_scales_);
  const bool ids64 = ids.dtype == DType::i64, wbf16 = wt.dtype == DType::bf16;
  std::vector<std::int64_t> id64(static_cast<std::size_t>(n));
  std::vector<float> wf(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    if (ids64) std::memcpy(&id64[i], reinterpret_cast<const std::uint8_t*>(ids.ptr) + 8 * i, 8);
    else id64[i] = reinterpret_cast<const std::int32_t*>(ids.ptr)[i];
    if (wbf16) {
      std::uint16_t b;
      std::memcpy(&b, reinterpret_cast<const std::uint8_t*>(wt.ptr) + 2 * i, 2);
      wf[i] = static_cast<float>(reference::bf16_bits_to_double(b));
    } else {
      wf[i] = reinterpret_cast<const float*>(wt.ptr)[i];
    }
  }
  reference::MoeLayerHostProblem p;
  p.experts = w.experts, p.hidden = w.hidden, p.inter = w.inter, p.topk = k, p.tokens = static_cast<int>(T);
  p.format = options_.format, p.bf16_activations = options_.activations == MoeActivation::bf16;
  p.act = reference::DualActivation{options_.activation == MoeEpilogue::silu ? reference::Activation::silu
                                                                            : reference::Activation::swigluoai,
                                    options_.swiglu_alpha, options_.swiglu_limit};
  p.gate_up = options_.gate_up == GateUpLayout::stacked ? 0 : 1;
  p.w13 = static_cast<const std::uint8_t*>(w.w13), p.w13_scales = host_w13_scales_.data();
  p.w2 = static_cast<const std::uint8_t*>(w.w2), p.w2_scales = host_w2_scales_.data();
  p.w13_alpha = w.w13_alpha, p.w13_alpha_up = w.w13_alpha_up, p.w2_alpha = w.w2_alpha;
  // the biases as floats, read now (they may change in place between runs)
  std::vector<float> b13, b2;
  auto floats = [&](const void* b, std::int64_t count, std::vector<float>& out) {
    if (b == nullptr) return static_cast<const float*>(nullptr);
    out.resize(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
      if (w.bias_f32) {
        out[i] = static_cast<const float*>(b)[i];
      } else {
        std::uint16_t h;
        std::memcpy(&h, static_cast<const std::uint8_t*>(b) + 2 * i, 2);
        out[i] = static_cast<float>(reference::bf16_bits_to_double(h));
      }
    }
    return static_cast<const float*>(out.data());
  };
  p.w13_bias = floats(w.w13_bias, std::int64_t{w.experts} * 2 * w.inter, b13);
  p.w2_bias = floats(w.w2_bias, std::int64_t{w.experts} * w.hidden, b2);
  p.a1_scale = options_.a1_scale, p.a2_scale = options_.a2_scale;
  p.x = x, p.ld_x = a.ld_hidden == 0 ? w.hidden : a.ld_hidden, p.x_packed = x_packed, p.x_scales = x_scales;
  p.topk_ids = id64.data(), p.topk_weights = wf.data();
  p.out = reinterpret_cast<std::uint16_t*>(a.out), p.ld_out = a.ld_out;
  nb::gil_scoped_release release;
  reference::moe_layer(p, threads);
}

void MoeLayerObject::check(nb::handle stream) const {
  if (!layer_) return;
  const cudaStream_t s = Binding::get().resolve_stream(stream, framework_, device_);
  nb::gil_scoped_release release;
  layer_->check(s);
}

std::string MoeLayerObject::describe() const {
  if (layer_) return layer_->describe();
  const MoeLayerWeights& w = weights_;
  return "CPU reference (host arrays): MoE layer, " + std::to_string(w.experts) + " experts, top-" +
         std::to_string(options_.topk) + ", H " + std::to_string(w.hidden) + ", I " + std::to_string(w.inter) + ", " +
         to_string(options_.format) + " weights x " +
         (options_.activations == MoeActivation::fp4 ? to_string(options_.format) : "bf16") + " activations, " +
         to_string(options_.activation);
}


void pack_pieces_on_device(nb::handle w, nb::handle out, nb::handle gate_up, const std::string& format,
                           std::uintptr_t stream) {
  TensorReader& reader = Binding::get().reader();
  Keepalive keep;
  const TensorView vw = reader.read(w, "w", -1, false, keep);
  const TensorView vo = reader.read(out, "out", -1, true, keep);
  if (!vw.cuda) fail("w", "must be a CUDA array");
  if (!vo.cuda || vo.device != vw.device) fail("out", "is on " + vo.device_text() + " but w is on " + vw.device_text());
  if ((vw.dtype != DType::byte && vw.dtype != DType::fp4x2) || vw.ndim != 3 || !is_row_major_dense(vw))
    fail("w", "must be dense packed FP4 weights [experts, rows, k / 2] (uint8), got " + std::string(to_string(vw.dtype)) +
                  " of shape " + vw.shape_text());
  const std::int64_t E = vw.shape[0], rows = vw.shape[1], k = 2 * vw.shape[2];
  if (rows % 16 != 0 || rows == 0)
    fail("w", "has " + std::to_string(rows) + " rows per expert; pieces need a positive multiple of 16");
  if (vo.dtype != DType::byte || vo.ndim != 4 || !is_row_major_dense(vo) || vo.shape[0] != E || vo.shape[1] * 16 != rows ||
      vo.shape[2] != (k + 127) / 128 || vo.shape[3] != 1024)
    fail("out", "must be a dense uint8 array [" + std::to_string(E) + ", " + std::to_string(rows / 16) + ", " +
                    std::to_string((k + 127) / 128) + ", 1024], got " + vo.shape_text());
  if (E > (1 << 30) || rows > (1 << 30) || k > (1 << 30)) fail("w", "too large");
  if (format != "mxfp4" && format != "nvfp4")
    fail("format", "'" + format + "' is not one of 'mxfp4', 'nvfp4' (the format of the layers that will read the pieces)");
  const Format f = format == "mxfp4" ? Format::mxfp4 : Format::nvfp4;
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  if (gate_up.is_none()) {
    pack_pieces(reinterpret_cast<const void*>(vw.ptr), reinterpret_cast<void*>(vo.ptr), static_cast<int>(E),
                static_cast<int>(rows), static_cast<int>(k), f, s);
    return;
  }
  const std::string g = nb::cast<std::string>(gate_up);
  if (g != "stacked" && g != "interleaved") fail("gate_up", "'" + g + "' is not one of None, 'stacked', 'interleaved'");
  pack_pieces_gate_up(reinterpret_cast<const void*>(vw.ptr), reinterpret_cast<void*>(vo.ptr), static_cast<int>(E),
                      static_cast<int>(rows / 2), static_cast<int>(k),
                      g == "stacked" ? GateUpLayout::stacked : GateUpLayout::interleaved, f, s);
}

void quantize_on_device(nb::handle x, nb::handle packed, nb::handle scales, nb::handle format, nb::handle layout,
                        float global_scale, std::uintptr_t stream) {
  TensorReader& reader = Binding::get().reader();
  Keepalive keep;
  const TensorView vx = reader.read(x, "x", -1, false, keep);
  const TensorView vp = reader.read(packed, "packed", -1, true, keep);
  const TensorView vs = reader.read(scales, "scales", -1, true, keep);
  QuantizeArgs a;
  a.format = parse_format(format);
  a.scale_layout = parse_layout(layout);
  if (!vx.cuda) fail("x", "must be a CUDA array (host arrays: fp4gemm.quantize quantises NumPy arrays)");
  for (const auto& [v, name] : {std::pair{&vp, "packed"}, std::pair{&vs, "scales"}})
    if (!v->cuda || v->device != vx.device) fail(name, "is on " + v->device_text() + " but x is on " + vx.device_text());
  a.input = vx.dtype == DType::bf16 ? InputType::bf16 : vx.dtype == DType::f16 ? InputType::f16
            : vx.dtype == DType::f32 ? InputType::f32 : (fail("x", std::string("has dtype ") + to_string(vx.dtype) +
                                                                    "; expected bfloat16, float16 or float32"),
                                                        InputType::f32);
  if (vx.ndim != 2 || (vx.shape[1] > 1 && vx.strides[1] != 1))
    fail("x", "must be 2-D [rows, K] and contiguous along K, got shape " + vx.shape_text());
  a.x = reinterpret_cast<const void*>(vx.ptr), a.rows = vx.shape[0], a.k = vx.shape[1];
  a.ldx = vx.shape[0] > 1 ? vx.strides[0] : vx.shape[1];
  const int vec = scale_block_size(a.format);
  if (vp.dtype != DType::byte || vp.ndim != 2 || vp.shape[0] != a.rows || vp.shape[1] != a.k / 2 || !is_row_major_dense(vp))
    fail("packed", "must be a dense uint8 [rows, K/2] array, got shape " + vp.shape_text());
  a.packed = reinterpret_cast<void*>(vp.ptr), a.ld_packed = a.k / 2;
  const std::int64_t want = static_cast<std::int64_t>(formats::scale_bytes(a.scale_layout, a.rows, a.k / vec));
  if ((vs.dtype != DType::byte && vs.dtype != DType::e4m3 && vs.dtype != DType::ue8m0) || vs.numel() != want ||
      !is_row_major_dense(vs))
    fail("scales", "must be a dense uint8 array of " + std::to_string(want) + " bytes, got shape " + vs.shape_text());
  a.scales = reinterpret_cast<void*>(vs.ptr);
  a.global_scale = global_scale;
  int previous = -1;
  cudaGetDevice(&previous);
  if (previous != vx.device) cudaSetDevice(vx.device);
  try {
    detail::launch_quantize(a, reinterpret_cast<cudaStream_t>(stream));
  } catch (...) {
    if (previous >= 0 && previous != vx.device) cudaSetDevice(previous);
    throw;
  }
  if (previous >= 0 && previous != vx.device) cudaSetDevice(previous);
}

void combine(nb::handle y, nb::handle topk_weights, nb::handle topk_ids, int experts, nb::handle out, nb::handle stream) {
  TensorReader& reader = Binding::get().reader();
  Keepalive keep;
  const TensorView vy = reader.read(y, "y", -1, false, keep);
  const TensorView wt = reader.read(topk_weights, "topk_weights", -1, false, keep);
  const TensorView ids = reader.read(topk_ids, "topk_ids", -1, false, keep);
  const TensorView vo = reader.read(out, "out", -1, true, keep);
  const bool cuda = vy.cuda;
  for (const auto& [v, name] : {std::pair{&vy, "y"}, std::pair{&wt, "topk_weights"}, std::pair{&ids, "topk_ids"},
                                std::pair{&vo, "out"}})
    if (v->cuda != cuda || (cuda && v->device != vy.device))
      fail(name, "is on " + v->device_text() + " but y is on " + vy.device_text() + "; all arrays must live on one device");
  if (ids.ndim != 2 || !is_row_major_dense(ids) || (ids.dtype != DType::i32 && ids.dtype != DType::i64))
    fail("topk_ids", "must be a dense int32 / int64 [T, topk] array, got shape " + ids.shape_text());
  const std::int64_t T = ids.shape[0], k = ids.shape[1];
  if ((wt.dtype != DType::f32 && !(cuda && wt.dtype == DType::bf16)) || wt.ndim != 2 || wt.shape[0] != T ||
      wt.shape[1] != k || !is_row_major_dense(wt))
    fail("topk_weights", std::string("must be a dense float32 ") + (cuda ? "(or bfloat16) " : "") +
                             "[T, topk] array like topk_ids, got shape " + wt.shape_text());
  if ((vy.dtype != DType::bf16 && vy.dtype != DType::raw16) || vy.ndim != 2 || vy.shape[0] != T * k ||
      !is_row_major_dense(vy))
    fail("y", "must be a dense bfloat16 [T * topk, H] array (a row per token and slot), got shape " + vy.shape_text());
  const std::int64_t H = vy.shape[1];
  if ((vo.dtype != DType::bf16 && vo.dtype != DType::raw16) || vo.ndim != 2 || vo.shape[0] != T || vo.shape[1] != H ||
      !is_row_major_dense(vo))
    fail("out", "must be a dense bfloat16 [T, H] array, got shape " + vo.shape_text());
  if (cuda) {
    if (T > INT32_MAX / std::max<std::int64_t>(k, 1)) fail("topk_ids", "more than 2^31 - 1 pairs");
    MoeCombineArgs a;
    a.y = reinterpret_cast<const void*>(vy.ptr), a.ld_y = H;
    a.topk_ids = reinterpret_cast<const void*>(ids.ptr), a.ids_int64 = ids.dtype == DType::i64;
    a.topk_weights = reinterpret_cast<const void*>(wt.ptr), a.weights_bf16 = wt.dtype == DType::bf16;
    a.tokens = static_cast<int>(T), a.topk = static_cast<int>(k), a.experts = experts, a.hidden = static_cast<int>(H);
    a.out = reinterpret_cast<void*>(vo.ptr), a.ld_out = H, a.device = vy.device;
    const cudaStream_t s = Binding::get().resolve_stream(stream, vy.framework, vy.device);
    nb::gil_scoped_release release;
    moe_combine(a, s);
    return;
  }
  std::vector<std::int64_t> id64(static_cast<std::size_t>(T * k));
  for (std::int64_t i = 0; i < T * k; ++i)
    id64[i] = ids.dtype == DType::i64 ? reinterpret_cast<const std::int64_t*>(ids.ptr)[i]
                                      : reinterpret_cast<const std::int32_t*>(ids.ptr)[i];
  nb::gil_scoped_release release;
  reference::moe_combine(reinterpret_cast<const std::uint16_t*>(vy.ptr), H, reinterpret_cast<const float*>(wt.ptr),
                         id64.data(), static_cast<int>(T), static_cast<int>(k), experts, static_cast<int>(H),
                         reinterpret_cast<std::uint16_t*>(vo.ptr), H);
}

}  // namespace fp4gemm::python

// ---- fp4gemm.moe.fused_experts' cache ---------------------------------------------------------------

namespace fp4gemm::python {

using namespace nb::literals;

namespace {

// A layer option as the layer keeps it (float); values outside float's range (and NaN) as given:
// converting them would be undefined, and the layer's checks refuse them by name.
double layer_float(double v) { return std::fabs(v) <= static_cast<double>(FLT_MAX) ? static_cast<float>(v) : v; }

}  // namespace

nb::object FusedExpertsCache::call(nb::handle hidden, nb::handle w13, nb::handle w13_scale, nb::handle w2,
                                   nb::handle w2_scale, nb::handle topk_weights, nb::handle topk_ids,
                                   nb::handle w13_alpha, nb::handle w13_alpha_up, nb::handle w2_alpha,
                                   nb::handle activation_arg, nb::handle act_format_arg, nb::handle gate_up,
                                   nb::handle scale_layout_arg, double a1_scale, double a2_scale,
                                   double swiglu_alpha, double swiglu_limit, nb::handle out, nb::handle stream,
                                   nb::handle w13_bias, nb::handle w2_bias, nb::handle weight_layout_arg) {
  TensorReader& reader = Binding::get().reader();
  const nb::handle objs[kWeights] = {w13, w13_scale, w2, w2_scale, w13_alpha, w13_alpha_up, w2_alpha, w13_bias, w2_bias};
  // The layer keeps these as float: entries compare them as the layer will use them (1.702 from one
  // caller and the float 1.702f from another are the same plan).
  for (double* v : {&a1_scale, &a2_scale, &swiglu_alpha, &swiglu_limit}) *v = layer_float(*v);
  // Option strings as the Python layer checks them (a wrong value is named when the plan is built).
  auto text = [](nb::handle h, const char* name, const char* expected, bool none_ok) {
    if (none_ok && h.is_none()) return std::string();
    if (!PyUnicode_Check(h.ptr()))
      throw Error(name, -1, std::string("must be ") + expected + ", got " + Py_TYPE(h.ptr())->tp_name);
    return nb::cast<std::string>(h);
  };
  const std::string activation = text(activation_arg, "activation", "'silu' or 'swigluoai'", false);
  const std::string act_format = text(act_format_arg, "act_format", "'nvfp4', 'mxfp4' or 'bf16'", false);
  const std::string scale_layout = text(scale_layout_arg, "scale_layout", "'blocked' or 'linear'", false);
  const std::string weight_layout = text(weight_layout_arg, "weight_layout", "'rows' or 'pieces'", false);
  // "" (the torch op's spelling of None) and None: the activation's default layout
  const std::string gate = text(gate_up, "gate_up", "None, 'stacked' or 'interleaved'", true);
  // The fast path: torch tensors throughout (the alphas may be None), [T, ...] tokens, [T, k] ids.
  bool fast = reader.is_torch(hidden) && reader.is_torch(topk_ids);
  for (int i = 0; i < kWeights && fast; ++i) fast = objs[i].is_none() ? i >= 4 : reader.is_torch(objs[i]);
  std::int64_t t = -1, topk = -1;
  if (fast) {
    static PyObject* const shape_name = PyUnicode_InternFromString("shape");
    const nb::object hs = nb::steal(PyObject_GetAttr(hidden.ptr(), shape_name));
    const nb::object is = nb::steal(PyObject_GetAttr(topk_ids.ptr(), shape_name));
    if (!hs.is_valid() || !is.is_valid()) throw nb::python_error();
    if (PyTuple_Check(hs.ptr()) && PyTuple_GET_SIZE(hs.ptr()) >= 1) t = PyLong_AsLongLong(PyTuple_GET_ITEM(hs.ptr(), 0));
    if (PyTuple_Check(is.ptr()) && PyTuple_GET_SIZE(is.ptr()) == 2) topk = PyLong_AsLongLong(PyTuple_GET_ITEM(is.ptr(), 1));
    if (PyErr_Occurred()) throw nb::python_error();
    fast = t >= 0 && topk >= 1;
  }
  std::uintptr_t ptrs[kWeights] = {};
  if (fast)
    for (int i = 0; i < kWeights; ++i) ptrs[i] = objs[i].is_none() ? 0 : reader.torch_data_ptr(objs[i]);
  auto find = [&]() -> Entry* {
    for (std::size_t j = 0; j < entries_.size(); ++j) {
      Entry& e = entries_[j];
      bool same = e.topk == topk && e.a1 == a1_scale && e.a2 == a2_scale && e.alpha == swiglu_alpha &&
                  e.limit == swiglu_limit;
      for (int i = 0; i < kWeights && same; ++i) same = e.ids[i] == objs[i].ptr() && e.views[i].ptr == ptrs[i];
      if (!same || e.activation != activation || e.act_format != act_format || e.gate_up != gate ||
          e.scale_layout != scale_layout || e.weight_layout != weight_layout)
        continue;
      // ids match: the same objects unless one died and its id was reused -- then the entry is
      // stale (its layer keeps the weights alive, so this should not happen): drop it
      for (int i = 0; i < kWeights && same; ++i) same = objs[i].is_none() || weak_ref_is(e.refs[i], objs[i]);
      if (same) return &e;
      entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(j));
      return nullptr;
    }
    return nullptr;
  };
  Entry* hit = fast ? find() : nullptr;
  if (hit == nullptr || t > hit->raw->options().max_tokens) {
    // the plan cached on the weights' addresses, grown to T (may build one)
    nb::object layer = plan_layer(objs, hidden, topk_ids, activation, act_format, gate, scale_layout, a1_scale,
                                  a2_scale, swiglu_alpha, swiglu_limit, weight_layout);
    bool cacheable = fast;
    nb::object refs[kWeights];
    for (int i = 0; i < kWeights && cacheable; ++i) {
      refs[i] = objs[i].is_none() ? nb::none() : weak_ref(objs[i]);
      cacheable = objs[i].is_none() || !refs[i].is_none();
    }
    if (!cacheable)  // host arrays, odd shapes (the checks name them), weights without weak references
      return layer.attr("run")(hidden, topk_ids, topk_weights, "out"_a = out, "stream"_a = stream);
    nb::object layer_c = layer.attr("_layer");  // (everything that can throw before the cache changes)
    MoeLayerObject* raw_c = nb::cast<MoeLayerObject*>(layer_c);
    hit = find();  // (again: Python ran in between)
    if (hit == nullptr) {
      if (entries_.size() >= kMaxEntries) entries_.erase(entries_.begin());
      Entry e;
      for (int i = 0; i < kWeights; ++i) e.ids[i] = objs[i].ptr(), e.refs[i] = refs[i];
      e.activation = activation, e.act_format = act_format, e.gate_up = gate, e.scale_layout = scale_layout;
      e.weight_layout = weight_layout;
      e.a1 = a1_scale, e.a2 = a2_scale, e.alpha = swiglu_alpha, e.limit = swiglu_limit;
      e.topk = static_cast<int>(topk);
      e.layer = layer_c, e.raw = raw_c;
      Keepalive keep;
      static const char* const names[kWeights] = {"w13", "w13_scale", "w2", "w2_scale", "w13_alpha", "w13_alpha_up",
                                                   "w2_alpha", "w13_bias", "w2_bias"};
      for (int i = 0; i < kWeights; ++i)
        if (!objs[i].is_none()) {
          e.views[i] = reader.read(objs[i], names[i], -1, false, keep, false);
          e.impls[i] = nb::cast<std::uintptr_t>(objs[i].attr("_cdata"));
        }
      entries_.push_back(std::move(e));
      hit = &entries_.back();
    } else {
      hit->layer = layer_c, hit->raw = raw_c;
    }
  }
  nb::object result = nb::borrow(out);
  if (out.is_none()) {
    if (!empty_like_.is_valid()) {
      nb::module_ torch = nb::module_::import_("torch");
      empty_like_ = torch.attr("empty_like"), contiguous_ = torch.attr("contiguous_format");
    }
    // [T, H] bf16 when hidden_states is valid (the run checks hidden_states first and names it)
    result = empty_like_(hidden, "memory_format"_a = contiguous_);
  }
  const nb::object layer = hit->layer;  // alive through the run whatever happens to the cache
  MoeLayerObject* raw = hit->raw;
  raw->run(hidden, topk_ids, topk_weights, result, stream, 0, nb::none(), nb::none(), nb::none());
  return result;
}

FusedExpertsCache::~FusedExpertsCache() { forget_torch_native_cache(this); }

nb::object FusedExpertsCache::plan_layer(const nb::handle (&objs)[kWeights], nb::handle hidden, nb::handle topk_ids,
                                         const std::string& activation, const std::string& act_format,
                                         const std::string& gate, const std::string& scale_layout, double a1_scale,
                                         double a2_scale, double swiglu_alpha, double swiglu_limit,
                                         const std::string& weight_layout) {
  // (T and top-k as MoeLayer.run reads them; a bad argument is named by the plan or the run)
  const std::int64_t t = nb::cast<std::int64_t>(hidden.attr("shape")[0]);
  const std::int64_t topk = nb::cast<std::int64_t>(topk_ids.attr("shape")[1]);
  // The key: each weight's address, shape, dtype and device (a number: its value; anything the
  // reader cannot read: its identity -- the plan then names what is wrong with it), the options.
  TensorReader& reader = Binding::get().reader();
  static const char* const names[kWeights] = {"w13", "w13_scale", "w2", "w2_scale", "w13_alpha", "w13_alpha_up",
                                               "w2_alpha", "w13_bias", "w2_bias"};
  char buf[96];
  std::string key;
  for (int i = 0; i < kWeights; ++i) {
    const nb::handle o = objs[i];
    if (o.is_none()) {
      key += "N|";
    } else if (PyFloat_Check(o.ptr()) || PyLong_Check(o.ptr())) {
      std::snprintf(buf, sizeof(buf), "v%a|", nb::cast<double>(o));
      key += buf;
    } else {
      try {
        Keepalive keep;
        const TensorView v = reader.read(o, names[i], -1, false, keep, false);
        std::snprintf(buf, sizeof(buf), "p%llx d%d c%d:%d s", static_cast<unsigned long long>(v.ptr),
                      static_cast<int>(v.dtype), static_cast<int>(v.cuda), v.device);
        key += buf;
        for (int d = 0; d < v.ndim; ++d) key += std::to_string(v.shape[d]) + ",";
        key += "|";
      } catch (const std::exception&) {
        PyErr_Clear();
        std::snprintf(buf, sizeof(buf), "i%p|", static_cast<void*>(o.ptr()));
        key += buf;
      }
    }
  }
  std::snprintf(buf, sizeof(buf), "k%lld a%a %a s%a %a", static_cast<long long>(topk), a1_scale, a2_scale,
                swiglu_alpha, swiglu_limit);
  key += buf;
  key += "|" + activation + "|" + act_format + "|" + gate + "|" + scale_layout + "|" + weight_layout;
  auto it = plans_.find(key);
  std::int64_t grown = t;
  if (it != plans_.end()) {
    const std::int64_t have = nb::cast<std::int64_t>(it->second.attr("max_tokens"));
    if (have >= t) return it->second;
    grown = std::max(t, 2 * have);
  }
  nb::object layer = nb::module_::import_("fp4gemm.moe").attr("MoeLayer")(
      objs[0], objs[1], objs[2], objs[3], "max_tokens"_a = std::max<std::int64_t>(grown, 1), "topk"_a = topk,
      "act_format"_a = act_format, "activation"_a = activation,
      "gate_up"_a = gate.empty() ? nb::object(nb::none()) : nb::object(nb::str(gate.c_str())),
      "scale_layout"_a = scale_layout, "w13_alpha"_a = objs[4], "w13_alpha_up"_a = objs[5], "w2_alpha"_a = objs[6],
      "a1_scale"_a = a1_scale, "a2_scale"_a = a2_scale, "swiglu_alpha"_a = swiglu_alpha,
      "swiglu_limit"_a = swiglu_limit, "w13_bias"_a = objs[7], "w2_bias"_a = objs[8],
      "weight_layout"_a = weight_layout);
  it = plans_.find(key);  // (again: Python ran in between)
  if (it != plans_.end()) {
    retired_.push_back(it->second);
    it->second = layer;
  } else {
    plans_.emplace(std::move(key), layer);
  }
  return layer;
}

const MoeLayerObject* FusedExpertsCache::find_native(const NativeKey& key, nb::object& keep) const {
  for (const Entry& e : entries_) {
    // (call() keeps the options as the layer's floats)
    if (e.topk != key.topk || e.a1 != layer_float(key.a1) || e.a2 != layer_float(key.a2) ||
        e.alpha != kOpSwigluAlpha ||
        e.limit != kOpSwigluLimit ||
        e.activation != key.activation || e.act_format != key.act_format || e.gate_up != key.gate_up ||
        e.scale_layout != key.scale_layout || e.weight_layout != key.weight_layout)
      continue;
    bool same = true;
    for (int i = 0; i < kWeights && same; ++i) {
      const TensorView &a = e.views[i], &b = key.weights[i];
      same = e.impls[i] == key.impls[i] && a.ptr == b.ptr && a.ndim == b.ndim && a.dtype == b.dtype &&
             a.cuda == b.cuda && a.device == b.device &&
             std::equal(a.shape, a.shape + a.ndim, b.shape) && std::equal(a.strides, a.strides + a.ndim, b.strides);
    }
    if (!same) continue;
    if (key.tokens > e.raw->options().max_tokens) return nullptr;  // the Python path grows the plan
    keep = e.layer;
    return e.raw;
  }
  return nullptr;
}

}  // namespace fp4gemm::python
