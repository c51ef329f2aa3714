// grouped_gemm for Python: memoised fast path, plan cache, host reference path, bound plans.
#include "grouped.hpp"

#include <span>
#include <string_view>

#include "fp4gemm/reference.hpp"
#include "host/core/validate.hpp"

namespace fp4gemm::python {

namespace {

// ---- option parsing ------------------------------------------------------------------------------

// The name of an option value: a str, a type's __name__ (np.float16), or str(obj) (torch.float16,
// np.dtype) without its "torch." prefix.
std::string option_text(nb::handle h) {
  std::string s;
  if (PyUnicode_Check(h.ptr())) {
    s = nb::cast<std::string>(h);
  } else if (PyType_Check(h.ptr()) && nb::hasattr(h, "__name__")) {
    s = nb::cast<std::string>(h.attr("__name__"));
  } else {
    s = nb::cast<std::string>(nb::str(h));
  }
  if (s.starts_with("torch.")) s = s.substr(6);
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string repr_text(nb::handle h) { return nb::cast<std::string>(nb::repr(h)); }

// ---- argument gathering ----------------------------------------------------------------------------

// A tuple holding the items of `h`: h itself when it is a tuple, else a snapshot (a list is
// copied, any other iterable materialised), so that the items stay owned and in place for the
// whole call whatever happens to the caller's list meanwhile.
nb::object snapshot(nb::handle h) {
  PyObject* t = nullptr;
  if (PyTuple_Check(h.ptr())) return nb::borrow(h);
  if (PyList_Check(h.ptr())) t = PyList_AsTuple(h.ptr());
  else t = PySequence_Tuple(h.ptr());
  if (!t) throw nb::python_error();
  return nb::steal(t);
}

Seq seq_of(nb::object tuple) {
  Seq s;
  s.owner = std::move(tuple);
  s.size = PySequence_Fast_GET_SIZE(s.owner.ptr());
  s.items = PySequence_Fast_ITEMS(s.owner.ptr());
  return s;
}

Seq as_seq(nb::handle h, const char* arg, TensorReader& reader) {
  if (PyList_Check(h.ptr()) || PyTuple_Check(h.ptr())) return seq_of(snapshot(h));
  if (h.is_none()) throw Error(arg, -1, "is None; expected a list of arrays, one per group");
  if (reader.is_torch(h) || nb::hasattr(h, "__dlpack__"))
    throw Error(arg, -1, "is a single array; expected a list (or tuple) of arrays, one per group");
  PyObject* t = PySequence_Tuple(h.ptr());  // any other iterable, materialised once
  if (!t) {
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw nb::python_error();
    PyErr_Clear();
    throw Error(arg, -1, "must be a list or tuple of arrays (one per group), got " +
                             std::string(Py_TYPE(h.ptr())->tp_name));
  }
  return seq_of(nb::steal(t));
}

const char* const kNames[kPerGroup] = {"a", "b", "sfa", "sfb", "c"};

// ---- alpha -------------------------------------------------------------------------------------------

enum class AlphaKind : std::uint8_t { none, values, device, host_array };

struct Alpha {
  AlphaKind kind = AlphaKind::none;
  std::vector<float> values;  // kind == values / host_array: one per group
  TensorView view;            // kind == device / host_array
};

std::vector<float> alpha_values_of(nb::handle alpha, int groups) {
  std::vector<float> v;
  if (PyFloat_Check(alpha.ptr()) || PyLong_Check(alpha.ptr())) {
    v.assign(groups, static_cast<float>(PyFloat_AsDouble(alpha.ptr())));
    if (PyErr_Occurred()) throw nb::python_error();
    return v;
  }
  // A list or tuple (alpha_is_number_list), snapshotted: PyFloat_AsDouble may run Python code.
  const Seq s = seq_of(snapshot(alpha));
  if (s.size != groups)
    throw Error("alpha", -1, "has " + std::to_string(s.size) + " values for " + std::to_string(groups) + " groups");
  v.resize(groups);
  for (int g = 0; g < groups; ++g) {
    const double x = PyFloat_AsDouble(s.items[g]);
    if (x == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      throw Error("alpha", g, "alpha[" + std::to_string(g) + "] is not a number: " + repr_text(s.items[g]));
    }
    v[g] = static_cast<float>(x);
  }
  return v;
}

bool alpha_is_number_list(nb::handle alpha) {
  return PyFloat_Check(alpha.ptr()) || PyLong_Check(alpha.ptr()) || PyList_Check(alpha.ptr()) ||
         PyTuple_Check(alpha.ptr());
}

void check_alpha_array(Alpha& a, int groups);

Alpha read_alpha(nb::handle alpha, int groups, TensorReader& reader, Keepalive& keep) {
  Alpha a;
  if (alpha.is_none()) return a;
  if (alpha_is_number_list(alpha)) {
    a.kind = AlphaKind::values;
    a.values = alpha_values_of(alpha, groups);
    return a;
  }
  a.view = reader.read(alpha, "alpha", -1, /*writable=*/false, keep);
  check_alpha_array(a, groups);
  return a;
}

// alpha given as an array (a.view): checked, its kind set, a host array's values read.
void check_alpha_array(Alpha& a, int groups) {
  const TensorView& t = a.view;
  if (t.dtype != DType::f32) throw Error("alpha", -1, std::string("must be float32, got ") + to_string(t.dtype));
  if (t.numel() != groups)
    throw Error("alpha", -1, "has " + std::to_string(t.numel()) + " values (shape " + t.shape_text() + ") for " +
                                 std::to_string(groups) + " groups");
  int dims = 0;
  for (int i = 0; i < t.ndim; ++i) dims += t.shape[i] > 1;
  if (dims > 1) throw Error("alpha", -1, "must be 1-D, got shape " + t.shape_text());
  if (t.cuda) {
    a.kind = AlphaKind::device;
  } else {
    a.kind = AlphaKind::host_array;
    std::int64_t stride = 1;
    for (int i = 0; i < t.ndim; ++i)
      if (t.shape[i] > 1) stride = t.strides[i];
    a.values.resize(groups);
    const float* p = reinterpret_cast<const float*>(t.ptr);
    for (int g = 0; g < groups; ++g) a.values[g] = p[g * stride];
  }
}

std::int64_t alpha_stride(const TensorView& t) {
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] > 1) return t.strides[i];
  return 1;
}

// The library options of a prepared call (the plan's, and what the host path validates against).
Options library_options(const Prepared& p) {
  Options o;
  o.format = p.options.format;
  o.scale_layout = p.options.layout;
  o.out_type = p.options.out;
  o.backend = p.options.backend;
  o.device = p.placement.device;
  return o;
}

// prepare() on arrays already read (defined with the Binding below).
Prepared prepare_from(const CallOptions& options, const std::vector<GroupViews>& views, const Alpha& al);

}  // namespace

// ---- option parsing (public) ---------------------------------------------------------------------

Format parse_format(nb::handle h) {
  const std::string s = option_text(h);
  if (s == "nvfp4") return Format::nvfp4;
  if (s == "mxfp4") return Format::mxfp4;
  throw Error("format", -1, "must be 'nvfp4' or 'mxfp4', got " + repr_text(h));
}

ScaleLayout parse_layout(nb::handle h) {
  const std::string s = option_text(h);
  if (s == "linear") return ScaleLayout::linear;
  if (s == "blocked" || s == "swizzled" || s == "reordered") return ScaleLayout::blocked;
  throw Error("scale_layout", -1, "must be 'linear' or 'blocked', got " + repr_text(h));
}

OutType parse_out(nb::handle h) {
  const std::string s = option_text(h);
  if (s == "float16" || s == "f16" || s == "fp16" || s == "half") return OutType::f16;
  if (s == "bfloat16" || s == "bf16") return OutType::bf16;
  if (s == "float32" || s == "f32" || s == "fp32" || s == "float") return OutType::f32;
  throw Error("out_dtype", -1, "must be 'float16', 'bfloat16' or 'float32', got " + repr_text(h));
}

Backend parse_backend(nb::handle h, Backend fallback) {
  if (h.is_none()) return fallback;
  const std::string s = option_text(h);
  if (s == "auto" || s == "automatic") return Backend::automatic;
  if (s == "fast") return Backend::fast;
  if (s == "reference") return Backend::reference;
  throw Error("backend", -1, "must be 'auto', 'fast' or 'reference', got " + repr_text(h));
}

MoeActivation parse_moe_activation(nb::handle h) {
  const std::string s = option_text(h);
  if (s == "fp4" || s == "nvfp4" || s == "mxfp4" || s == "w4a4") return MoeActivation::fp4;
  if (s == "bf16" || s == "bfloat16" || s == "w4a16") return MoeActivation::bf16;
  throw Error("activation", -1, "must be 'fp4' (W4A4: packed e2m1 + scales) or 'bf16' (W4A16), got " + repr_text(h));
}

MoeLayout parse_moe_layout(nb::handle h) {
  const std::string s = option_text(h);
  if (s == "contiguous") return MoeLayout::contiguous;
  if (s == "masked") return MoeLayout::masked;
  throw Error("layout", -1, "must be 'contiguous' or 'masked', got " + repr_text(h));
}

// ---- Binding ------------------------------------------------------------------------------------------

Binding& Binding::get() {
  static Binding* b = new Binding();  // leaked on purpose: plans must not be freed after CUDA shuts down
  return *b;
}

Binding::Binding() : plans_(64, kDefaultMaxBytes), memo_(64) {}

CacheStats Binding::stats() const {
  std::lock_guard lock(mutex_);
  CacheStats s;
  s.plans = plans_.size();
  s.memo = memo_.size();
  s.pinned = plans_.pinned();
  s.capacity = plans_.capacity();
  s.bytes = plans_.bytes();
  s.max_bytes = plans_.max_bytes();
  s.hits = hits_;
  s.misses = misses_;
  s.memo_hits = memo_hits_;
  return s;
}

// Evicted plans and memo entries are declared before the lock in the functions below, so that
// they are destroyed after it is released (see mutex_).

void Binding::clear_cache(bool pinned) {
  std::vector<PlanPtr> plans;
  std::vector<MemoPtr> memo;
  std::lock_guard lock(mutex_);
  memo_.clear(memo);
  plans_.clear(pinned, plans);
  hits_ = misses_ = memo_hits_ = 0;
}

void Binding::set_capacity(std::size_t n) {
  if (n < 1) throw Error("capacity", -1, "must be at least 1");
  std::vector<PlanPtr> plans;
  std::vector<MemoPtr> memo;
  std::lock_guard lock(mutex_);
  plans_.set_limits(n, plans_.max_bytes(), plans);
  memo_.set_capacity(n, memo);
}

void Binding::set_max_bytes(std::size_t bytes) {
  std::vector<PlanPtr> plans;
  std::lock_guard lock(mutex_);
  plans_.set_limits(plans_.capacity(), bytes, plans);
}

bool Binding::is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();  // e.g. the legacy stream while another thread captures
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

cudaStream_t Binding::resolve_stream(nb::handle stream, Framework f, int device) {
  std::uintptr_t s = 0;
  if (stream.is_none()) {
    s = reader_.current_stream(f, device);
  } else if (PyLong_Check(stream.ptr())) {
    s = nb::cast<std::uintptr_t>(stream);
  } else if (nb::hasattr(stream, "cuda_stream")) {  // torch.cuda.Stream
    s = nb::cast<std::uintptr_t>(stream.attr("cuda_stream"));
  } else if (nb::hasattr(stream, "__cuda_stream__")) {  // CUDA stream protocol: (version, handle)
    nb::object t = stream.attr("__cuda_stream__")();
    s = nb::cast<std::uintptr_t>(t[1]);
  } else if (nb::hasattr(stream, "ptr")) {  // cupy.cuda.Stream
    s = nb::cast<std::uintptr_t>(stream.attr("ptr"));
  } else {
    throw Error("stream", -1, "must be None, an int (cudaStream_t) or a stream object (torch.cuda.Stream, "
                              "cupy.cuda.Stream, __cuda_stream__), got " + repr_text(stream));
  }
  return reinterpret_cast<cudaStream_t>(s);
}

CallOptions Binding::parse_options(nb::handle format, nb::handle scale_layout, nb::handle out_dtype,
                                   nb::handle backend) const {
  return CallOptions{parse_format(format), parse_layout(scale_layout), parse_out(out_dtype),
                     parse_backend(backend, default_backend_)};
}

CallArgs Binding::gather(nb::handle a, nb::handle b, nb::handle sfa, nb::handle sfb, nb::handle c) {
  CallArgs args;
  const nb::handle in[kPerGroup] = {a, b, sfa, sfb, c};
  for (int i = 0; i < kPerGroup; ++i) args.seqs[i] = as_seq(in[i], kNames[i], reader_);
  const Py_ssize_t g = args.seqs[0].size;
  for (int i = 1; i < kPerGroup; ++i)
    if (args.seqs[i].size != g)
      throw Error(kNames[i], -1, "has " + std::to_string(args.seqs[i].size) + " entries but a has " +
                                     std::to_string(g) + "; every list needs one entry per group");
  if (g > INT32_MAX) throw Error("a", -1, "too many groups");
  args.groups = static_cast<int>(g);
  args.objects.resize(static_cast<std::size_t>(g) * kPerGroup);
  for (Py_ssize_t j = 0; j < g; ++j)
    for (int i = 0; i < kPerGroup; ++i) args.objects[j * kPerGroup + i] = args.seqs[i].items[j];
  return args;
}

Prepared Binding::prepare(const CallOptions& options, const CallArgs& args, nb::handle alpha, Keepalive& keep) {
  const int n = args.groups;
  std::vector<GroupViews> views(n);
  for (int g = 0; g < n; ++g) {
    PyObject* const* o = &args.objects[static_cast<std::size_t>(g) * kPerGroup];
    GroupViews& v = views[g];
    v.a = reader_.read(o[0], "a[" + std::to_string(g) + "]", g, false, keep);
    v.b = reader_.read(o[1], "b[" + std::to_string(g) + "]", g, false, keep);
    v.sfa = reader_.read(o[2], "sfa[" + std::to_string(g) + "]", g, false, keep);
    v.sfb = reader_.read(o[3], "sfb[" + std::to_string(g) + "]", g, false, keep);
    v.c = reader_.read(o[4], "c[" + std::to_string(g) + "]", g, true, keep);
  }
  return prepare_from(options, views, read_alpha(alpha, n, reader_, keep));
}

namespace {

// prepare() on arrays already read: every group's checks, the placement, the plan key.
Prepared prepare_from(const CallOptions& options, const std::vector<GroupViews>& views, const Alpha& al) {
  Prepared p;
  p.options = options;
  const int n = static_cast<int>(views.size());
  p.views.reserve(static_cast<std::size_t>(n) * kPerGroup);
  for (const GroupViews& v : views)
    for (const TensorView* t : {&v.a, &v.b, &v.sfa, &v.sfb, &v.c}) p.views.push_back(*t);
  p.alpha_is_array = al.kind == AlphaKind::device || al.kind == AlphaKind::host_array;
  if (p.alpha_is_array) p.alpha_view = al.view;
  p.placement = common_placement(views, al.kind == AlphaKind::device ? &al.view : nullptr);
  if (n > 0) p.framework = views[0].a.framework;
  p.groups.resize(n);
  for (int g = 0; g < n; ++g) {
    GroupDesc& d = p.groups[g];
    d = describe_group(g, views[g], p.options);
    if (!al.values.empty()) d.alpha = al.values[g];
    if (al.kind == AlphaKind::device)
      d.alpha_device = reinterpret_cast<const float*>(al.view.ptr) + g * alpha_stride(al.view);
  }
  // Plan key: everything the plan is bound to.
  p.key.reserve(6 + 13 * static_cast<std::size_t>(n));
  p.key.push_back(static_cast<std::uint64_t>(p.options.format));
  p.key.push_back(static_cast<std::uint64_t>(p.options.layout));
  p.key.push_back(static_cast<std::uint64_t>(p.options.out));
  p.key.push_back(static_cast<std::uint64_t>(p.options.backend));
  p.key.push_back(static_cast<std::uint64_t>(p.placement.device + 1));
  p.key.push_back(static_cast<std::uint64_t>(n));
  for (const GroupDesc& d : p.groups) {
    for (std::uint64_t w : {static_cast<std::uint64_t>(d.m), static_cast<std::uint64_t>(d.n),
                            static_cast<std::uint64_t>(d.k), reinterpret_cast<std::uint64_t>(d.a),
                            static_cast<std::uint64_t>(d.lda), reinterpret_cast<std::uint64_t>(d.b),
                            static_cast<std::uint64_t>(d.ldb), reinterpret_cast<std::uint64_t>(d.sfa),
                            reinterpret_cast<std::uint64_t>(d.sfb), reinterpret_cast<std::uint64_t>(d.c),
                            static_cast<std::uint64_t>(d.ldc), float_bits(d.alpha),
                            reinterpret_cast<std::uint64_t>(d.alpha_device)})
      p.key.push_back(w);
  }
  return p;
}

}  // namespace

PlanPtr Binding::make_plan(const Prepared& p, bool capturing, cudaStream_t stream) {
  const Options o = library_options(p);
  return build_outside_capture(capturing,
                               [&] { return std::make_shared<const Plan>(std::span<const GroupDesc>(p.groups), o, stream); });
}

void Binding::run(const PlanPtr& plan, cudaStream_t stream, bool capturing) {
  if (capturing) {
    std::lock_guard lock(mutex_);
    plans_.pin(plan);
  }
  plan->run(stream);
}

void Binding::run_host(const Prepared& p, int threads) {
  if (p.options.backend == Backend::fast)
    throw Error("backend", -1, "'fast' needs CUDA arrays; host (NumPy) arrays run the CPU reference "
                               "(backend='auto' or 'reference')");
  // The validation a Plan runs on the device path (minus the device-pointer checks), so that the
  // host path accepts exactly what the device accepts, with the same messages: overlapping
  // outputs, K = 0, non-finite alpha, unaligned pointers and strides are errors on both.
  detail::validate_groups(p.groups, library_options(p), /*check_pointers=*/false);
  std::vector<reference::HostGroup> hg(p.groups.size());
  for (std::size_t g = 0; g < p.groups.size(); ++g) {
    const GroupDesc& d = p.groups[g];
    hg[g] = reference::HostGroup{d.m, d.n, d.k,
                                 static_cast<const std::uint8_t*>(d.a), d.lda,
                                 static_cast<const std::uint8_t*>(d.b), d.ldb,
                                 static_cast<const std::uint8_t*>(d.sfa), static_cast<const std::uint8_t*>(d.sfb),
                                 d.c, d.ldc, d.alpha};
  }
  nb::gil_scoped_release release;
  reference::grouped_gemm(hg, p.options.format, p.options.layout, p.options.out, threads);
}

void Binding::grouped_gemm(nb::handle a, nb::handle b, nb::handle sfa, nb::handle sfb, nb::handle c, nb::handle alpha,
                           nb::handle format, nb::handle scale_layout, nb::handle out_dtype, nb::handle backend,
                           nb::handle stream, int threads) {
  const CallOptions options = parse_options(format, scale_layout, out_dtype, backend);
  // Gathered once: the snapshot owns every array object until the call returns (the host path
  // and plan building release the GIL; `args.objects` is used again afterwards by remember()).
  const CallArgs args = gather(a, b, sfa, sfb, c);
  if (args.groups == 0) return;
  std::vector<std::uint64_t> signature;
  std::uint64_t sig_hash = 0;
  bool memoizable = false;
  if (try_memo(options, alpha, args.objects, stream, signature, sig_hash, memoizable)) return;

  // ---- full path: read and validate every array, then find or build the plan ------------------
  Keepalive keep;
  Prepared p = prepare(options, args, alpha, keep);
  if (!p.placement.cuda) {
    run_host(p, threads);
    return;
  }
  const cudaStream_t s = resolve_stream(stream, p.framework, p.placement.device);
  const bool capturing = is_capturing(s);
  const PlanPtr plan = find_or_build(p, capturing, s);
  if (memoizable)
    remember(std::move(signature), sig_hash, args.objects, p.views, plan, p.placement.device, capturing);
  run(plan, s, capturing);
}

PlanPtr Binding::find_or_build(const Prepared& p, bool capturing, cudaStream_t stream) {
  const std::uint64_t h = hash_words(p.key);
  PlanPtr plan;
  {
    std::lock_guard lock(mutex_);
    plan = plans_.find(p.key, h);
    ++(plan ? hits_ : misses_);
  }
  if (!plan) {
    PlanPtr built = make_plan(p, capturing, stream);  // releases the GIL: other threads may use the caches
    std::vector<PlanPtr> evicted;
    std::lock_guard lock(mutex_);
    plan = plans_.insert(p.key, h, std::move(built), /*may_evict=*/!capturing, evicted);
  }
  return plan;
}

namespace {

bool same_views(const std::vector<TensorView>& x, const std::vector<TensorView>& y) {
  if (x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!same_view(x[i], y[i])) return false;
  return true;
}

bool same_call(const GroupedViewsCall& x, const GroupedViewsCall& y) {
  return x.groups == y.groups && x.format == y.format && x.scale_layout == y.scale_layout &&
         x.out_dtype == y.out_dtype && x.backend == y.backend && x.alpha_is_array == y.alpha_is_array &&
         (!x.alpha_is_array || same_view(x.alpha_view, y.alpha_view)) && x.alpha_values.size() == y.alpha_values.size() &&
         std::equal(x.alpha_values.begin(), x.alpha_values.end(), y.alpha_values.begin(),
                    [](float u, float v) { return float_bits(u) == float_bits(v); }) &&
         same_views(x.views, y.views);
}

nb::object str_or_none(const std::string& s) { return s.empty() ? nb::object(nb::none()) : nb::object(nb::str(s.c_str())); }

}  // namespace

void Binding::grouped_gemm_views(const GroupedViewsCall& call, cudaStream_t stream) {
  const CallOptions options = parse_options(nb::str(call.format.c_str()), nb::str(call.scale_layout.c_str()),
                                            nb::str(call.out_dtype.c_str()), str_or_none(call.backend));
  if (call.groups == 0) return;
  if (call.views.size() != static_cast<std::size_t>(call.groups) * kPerGroup)
    throw Error("a", -1, "internal: the views of a call do not match its group count");
  std::vector<GroupViews> views(call.groups);
  for (int g = 0; g < call.groups; ++g) {
    const TensorView* v = &call.views[static_cast<std::size_t>(g) * kPerGroup];
    views[g] = GroupViews{v[0], v[1], v[2], v[3], v[4]};
  }
  Alpha al;
  if (call.alpha_is_array) {
    al.view = call.alpha_view;
    check_alpha_array(al, call.groups);
  } else if (!call.alpha_values.empty()) {
    if (call.alpha_values.size() != static_cast<std::size_t>(call.groups))
      throw Error("alpha", -1, "has " + std::to_string(call.alpha_values.size()) + " values for " +
                                   std::to_string(call.groups) + " groups");
    al.kind = AlphaKind::values;
    al.values = call.alpha_values;
  }
  const Prepared p = prepare_from(options, views, al);
  if (!p.placement.cuda) throw Error("a", -1, "is on the CPU; this path runs CUDA arrays");
  const bool capturing = is_capturing(stream);
  const PlanPtr plan = find_or_build(p, capturing, stream);
  // Not remembered: alpha in host memory (its values went into the plan when it was read; a
  // later call must read them again).
  if (!(call.alpha_is_array && !call.alpha_view.cuda)) {
    std::lock_guard lock(mutex_);
    views_memo_.call = call;
    views_memo_.backend = options.backend;
    views_memo_.plan = plan;
  }
  run(plan, stream, capturing);
}

bool Binding::replay_views(const GroupedViewsCall& call, cudaStream_t stream) {
  PlanPtr plan;
  {
    std::lock_guard lock(mutex_);
    if (!same_call(call, views_memo_.call)) return false;
    // backend "": the default, which set_default_backend may have changed since
    if (call.backend.empty() && views_memo_.backend != default_backend_) return false;
    // The plan cache decides how long a plan lives: a plan it evicted is not resurrected here.
    plan = views_memo_.plan.lock();
    if (!plan || !plans_.touch(plan)) return false;
    ++memo_hits_;
  }
  run(plan, stream, is_capturing(stream));
  return true;
}

void Binding::remember(std::vector<std::uint64_t> signature, std::uint64_t hash, const std::vector<PyObject*>& objects,
                       const std::vector<TensorView>& views, const PlanPtr& plan, int device, bool capturing) {
  auto e = std::make_shared<MemoEntry>();
  e->hash = hash;
  e->signature = std::move(signature);
  e->plan = plan;
  e->device = device;
  for (const TensorView& v : views) e->states.add(v);  // the state the plan was made from, as prepare() read it
  e->refs.reserve(objects.size());
  for (PyObject* o : objects) {
    nb::object ref = weak_ref(o);
    if (ref.is_none()) return;  // not weak-referenceable: never memoised
    e->refs.push_back(std::move(ref));
  }
  std::vector<MemoPtr> evicted;
  std::lock_guard lock(mutex_);
  memo_.insert(std::move(e), /*may_evict=*/!capturing, evicted);
}

bool Binding::try_memo(const CallOptions& o, nb::handle alpha, const std::vector<PyObject*>& objects,
                       nb::handle stream, std::vector<std::uint64_t>& signature, std::uint64_t& hash,
                       bool& memoizable, const std::vector<std::uint64_t>& extra) {
  memoizable = false;
  // Only torch tensors (cheap probes) with alpha given as numbers; alpha arrays take the full path.
  if (!alpha.is_none() && !alpha_is_number_list(alpha)) return false;
  for (PyObject* obj : objects)
    if (!reader_.is_torch(obj)) return false;
  const int groups = static_cast<int>(objects.size() / kPerGroup);

  signature.reserve(8 + extra.size() + objects.size() + groups);
  signature.insert(signature.end(), extra.begin(), extra.end());
  signature.push_back(static_cast<std::uint64_t>(o.format));
  signature.push_back(static_cast<std::uint64_t>(o.layout));
  signature.push_back(static_cast<std::uint64_t>(o.out));
  signature.push_back(static_cast<std::uint64_t>(o.backend));
  signature.push_back(static_cast<std::uint64_t>(groups));
  if (alpha.is_none()) {
    signature.push_back(0);
  } else {
    signature.push_back(1);
    for (float v : alpha_values_of(alpha, groups)) signature.push_back(float_bits(v));
  }
  for (PyObject* obj : objects) signature.push_back(reinterpret_cast<std::uint64_t>(obj));
  hash = hash_words(signature);
  memoizable = true;

  MemoPtr e;
  {
    std::lock_guard lock(mutex_);
    e = memo_.find(signature, hash);
  }
  if (!e) return false;
  // Same objects as before: check they are the same live tensors in the same state (in-place
  // set_, resize_, transpose_, as_strided_, .data = ... change it). These probes can run Python
  // code (tensor subclasses), which may switch threads or call fp4gemm again: `e` is our own
  // reference, valid whatever happens to the memo meanwhile.
  bool valid = e->refs.size() == objects.size();
  for (std::size_t i = 0; valid && i < objects.size(); ++i)
    valid = weak_ref_is(e->refs[i], objects[i]) && e->states.unchanged(reader_, i, objects[i]);
  PlanPtr plan;
  {
    std::vector<MemoPtr> evicted;
    std::lock_guard lock(mutex_);
    // The plan cache decides how long a plan lives: a plan it evicted is not resurrected here.
    if (valid) plan = e->plan.lock();
    if (plan && !plans_.touch(plan)) plan.reset();
    if (plan) ++memo_hits_;
    else memo_.erase(e, evicted);
  }
  if (!plan) return false;
  const cudaStream_t s = resolve_stream(stream, Framework::torch, e->device);
  run(plan, s, is_capturing(s));
  return true;
}

// ---- BoundGemm ------------------------------------------------------------------------------------------

BoundGemm::BoundGemm(nb::handle a, nb::handle b, nb::handle sfa, nb::handle sfb, nb::handle c, nb::handle alpha,
                     nb::handle format, nb::handle scale_layout, nb::handle out_dtype, nb::handle backend) {
  Binding& bind = Binding::get();
  const CallOptions options = bind.parse_options(format, scale_layout, out_dtype, backend);
  const CallArgs args = bind.gather(a, b, sfa, sfb, c);
  Keepalive keep;
  const Prepared p = bind.prepare(options, args, alpha, keep);
  if (!p.placement.cuda && !p.groups.empty())
    throw Error("a", -1, "GroupedGemm needs CUDA arrays; for host (NumPy) arrays call fp4gemm.grouped_gemm, "
                         "which runs the CPU reference");
  TensorReader& reader = bind.reader();
  // Index i: objects in CallArgs order (group-major a, b, sfa, sfb, c), then alpha.
  auto keep_alive = [&](PyObject* o, std::uint32_t i, const TensorView& view) {
    refs_.append(nb::borrow(o));
    if (!reader.is_torch(o)) return;
    storages_.append(reader.torch_storage(o));
    watched_.push_back(Watched{o, i});
    states_.add(view);
  };
  for (std::size_t i = 0; i < args.objects.size(); ++i)
    keep_alive(args.objects[i], static_cast<std::uint32_t>(i), p.views[i]);
  if (p.alpha_is_array) keep_alive(alpha.ptr(), static_cast<std::uint32_t>(args.objects.size()), p.alpha_view);
  else if (!alpha.is_none()) refs_.append(nb::borrow(alpha));
  num_objects_ = args.objects.size();
  // The caller's list or tuple (as given); the snapshot when c was another iterable.
  c_ = PyList_Check(c.ptr()) || PyTuple_Check(c.ptr()) ? nb::borrow(c) : args.seqs[4].owner;
  framework_ = p.framework;
  device_ = p.placement.device;
  if (!p.groups.empty()) {
    const cudaStream_t s = bind.resolve_stream(nb::none(), framework_, device_);
    plan_ = bind.make_plan(p, Binding::is_capturing(s), s);
  }
}

void BoundGemm::run(nb::handle stream) const {
  if (!plan_) return;
  Binding& bind = Binding::get();
  for (std::size_t j = 0; j < watched_.size(); ++j) {
    const Watched& w = watched_[j];
    if (states_.unchanged(bind.reader(), j, w.obj)) continue;
    const bool is_alpha = w.index == num_objects_;
    const int g = is_alpha ? -1 : static_cast<int>(w.index / kPerGroup);
    throw Error(is_alpha ? std::string("alpha") : std::string(kNames[w.index % kPerGroup]) + "[" + std::to_string(g) + "]",
                g,
                "changed since this GroupedGemm was built: its data_ptr(), shape, strides or dtype differ (set_(), "
                "resize_(), transpose_(), .data = ...). The plan is bound to the old memory and layout; build a new "
                "GroupedGemm");
  }
  const cudaStream_t s = bind.resolve_stream(stream, framework_, device_);
  bind.run(plan_, s, Binding::is_capturing(s));
}

}  // namespace fp4gemm::python
