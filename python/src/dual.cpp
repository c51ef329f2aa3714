// fp4gemm.DualGemm (see dual.hpp).
#include "dual.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <utility>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe.hpp"
#include "fp4gemm/reference.hpp"
#include "host/core/validate.hpp"

namespace fp4gemm::python {

namespace {

// Errors of the grouped GEMM's checks, renamed for a dual GEMM: the grouped GEMM's "b[g]" /
// "sfb[g]" / "alpha" become b1 / sfb1 / alpha (gate) or b2 / sfb2 / alpha_up (up).
// (The up product is read after the gate one passed: a mismatch with c there is b2's.)
// An Error's message without what the library puts in front of it ("fp4gemm: <argument> (group
// g): "), for an Error that names another argument or group.
std::string bare_message(const Error& e) {
  const std::string what = e.what(), head = "fp4gemm: " + e.argument();
  std::string message = what.rfind(head, 0) == 0 ? what.substr(head.size()) : what;
  if (message.rfind(" (group ", 0) == 0) message = message.substr(message.find(')') + 1);
  if (message.rfind(": ", 0) == 0) message = message.substr(2);
  return message;
}

template <class F>
auto renamed(const char* b_name, const char* sfb_name, const char* alpha_name, F&& body) {
  try {
    return body();
  } catch (const Error& e) {
    std::string arg = e.argument(), message = bare_message(e);
    if (arg.rfind("b[", 0) == 0) arg = b_name + arg.substr(1);
    else if (arg.rfind("sfb[", 0) == 0) arg = sfb_name + arg.substr(3);
    else if (arg == "alpha") arg = alpha_name;
    else if (arg.rfind("c[", 0) == 0 && std::string(b_name) == "b2") {
      arg = "b2" + arg.substr(1);
      message = "the up weights do not match b1 and c (the same N rows and K): " + message;
    }
    throw Error(arg, e.group(), message);
  }
}

}  // namespace

// The gate and the up product read like two grouped GEMMs over the same a / sfa / c: each pair
// of lists gets the grouped GEMM's checks (dtypes, shapes against a and c, strides, devices).
DualCall::DualCall(Binding& bind, nb::handle a, nb::handle b1, nb::handle b2, nb::handle sfa, nb::handle sfb1,
                   nb::handle sfb2, nb::handle c)
    : gate(renamed("b1", "sfb1", "alpha", [&] { return bind.gather(a, b1, sfa, sfb1, c); })),
      up(renamed("b2", "sfb2", "alpha_up", [&] { return bind.gather(a, b2, sfa, sfb2, c); })) {
  objects = gate.objects;
  for (int g = 0; g < gate.groups; ++g) {
    objects.push_back(up.objects[static_cast<std::size_t>(g) * kPerGroup + 1]);  // b2[g]
    objects.push_back(up.objects[static_cast<std::size_t>(g) * kPerGroup + 3]);  // sfb2[g]
  }
}

void DualCall::prepare(Binding& bind, const CallOptions& options, nb::handle alpha, nb::handle alpha_up) {
  pg = renamed("b1", "sfb1", "alpha", [&] { return bind.prepare(options, gate, alpha, keep); });
  pu = renamed("b2", "sfb2", "alpha_up", [&] { return bind.prepare(options, up, alpha_up, keep); });
  const bool cuda = pg.placement.cuda;
  const int device = pg.placement.device;
  if (pu.placement.cuda != cuda || (cuda && pu.placement.device != device))
    throw Error("b2", -1, "b2 / sfb2 live on " + std::string(pu.placement.cuda ? "cuda:" + std::to_string(pu.placement.device) : "the host") +
                              ", a / b1 on " + (cuda ? "cuda:" + std::to_string(device) : std::string("the host")));
  groups = pg.groups;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const GroupDesc& u = pu.groups[g];
    GroupDesc& d = groups[g];
    if (u.ldb != d.ldb)
      throw Error("b2[" + std::to_string(g) + "]", static_cast<int>(g),
                  "row stride " + std::to_string(u.ldb) + " bytes differs from b1's (" + std::to_string(d.ldb) +
                      "); the gate and up weights of a group share one row stride");
    d.b_up = u.b, d.sfb_up = u.sfb, d.alpha_up = u.alpha, d.alpha_up_device = u.alpha_device;
  }
  views = pg.views;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    views.push_back(pu.views[g * kPerGroup + 1]);
    views.push_back(pu.views[g * kPerGroup + 3]);
  }
}

Epilogue dual_activation(const std::string& activation) {
  if (activation == "silu") return Epilogue::silu;
  if (activation == "swigluoai") return Epilogue::swigluoai;
  throw Error("activation", -1, "'" + activation + "' is not one of 'silu', 'swigluoai'");
}

Options DualCall::library_options(const CallOptions& options, Epilogue epilogue, float swiglu_alpha, float swiglu_limit,
                                  bool rescale_each_run) const {
  Options o;
  o.epilogue = epilogue;
  o.format = options.format, o.scale_layout = options.layout, o.out_type = options.out;
  o.backend = options.backend;  // (the default backend when none is named: fp4gemm.set_default_backend)
  o.device = pg.placement.device;
  o.swiglu_alpha = swiglu_alpha, o.swiglu_limit = swiglu_limit;
  o.rescale_each_run = rescale_each_run;
  return o;
}

DualGemmObject::DualGemmObject(nb::handle a, nb::handle b1, nb::handle b2, nb::handle sfa, nb::handle sfb1,
                               nb::handle sfb2, nb::handle c, nb::handle alpha, nb::handle alpha_up,
                               nb::handle format, nb::handle scale_layout, nb::handle out_dtype,
                               const std::string& activation, float swiglu_alpha, float swiglu_limit,
                               bool rescale_each_run) {
  Binding& bind = Binding::get();
  const CallOptions options = bind.parse_options(format, scale_layout, out_dtype, nb::none());
  const Epilogue epilogue = dual_activation(activation);
  DualCall call(bind, a, b1, b2, sfa, sfb1, sfb2, c);
  call.prepare(bind, options, alpha, alpha_up);
  const CallArgs& gate = call.gate;
  const CallArgs& up = call.up;
  const Prepared& pg = call.pg;
  const Prepared& pu = call.pu;
  options_ = call.library_options(options, epilogue, swiglu_alpha, swiglu_limit, rescale_each_run);
  cuda_ = pg.placement.cuda, device_ = pg.placement.device, framework_ = pg.framework;
  groups_ = call.groups;
  // What the plan points into stays alive; torch tensors are watched for in-place changes.
  TensorReader& reader = bind.reader();
  static const char* kNames[5] = {"a", "b", "sfa", "sfb", "c"};
  // (a, sfa and c appear in both lists: watched once, from the gate's.)
  auto watch = [&](const CallArgs& args, const Prepared& p, const char* b_name, const char* sfb_name, bool weights_only) {
    for (std::size_t i = 0; i < args.objects.size(); ++i) {
      const int field = static_cast<int>(i % 5);
      if (weights_only && field != 1 && field != 3) continue;
      PyObject* o = args.objects[i];
      refs_.append(nb::borrow(o));
      if (!reader.is_torch(o)) continue;
      storages_.append(reader.torch_storage(o));
      const std::string name = field == 1 ? b_name : field == 3 ? sfb_name : kNames[field];
      watched_.push_back(Watched{o, name + "[" + std::to_string(i / 5) + "]"});
      states_.add(p.views[i]);
      if (field == 3 && !options_.rescale_each_run) {
        copied_.add(o);
        copied_names_.push_back(watched_.back().name);
      }
    }
  };
  watch(gate, pg, "b1", "sfb1", false);
  watch(up, pu, "b2", "sfb2", true);
  for (nb::handle h : {alpha, alpha_up})
    if (!h.is_none()) refs_.append(nb::borrow(h));  // (device alphas: the plan reads them at run time)
  c_ = PyList_Check(c.ptr()) || PyTuple_Check(c.ptr()) ? nb::borrow(c) : gate.seqs[4].owner;
  if (cuda_ && !groups_.empty()) {
    // (plan-time reads -- the paired scale copy -- wait for the current stream's work: sfb1 / sfb2
    // may have just been written there)
    const cudaStream_t s = bind.resolve_stream(nb::none(), framework_, device_);
    plan_ = build_outside_capture(Binding::is_capturing(s), [&] {
      return std::make_shared<const Plan>(std::span<const GroupDesc>(groups_), options_, s);
    });
  } else {
    detail::validate_groups(groups_, options_, /*check_pointers=*/false);  // the host path accepts what the device does
  }
}

void DualGemmObject::run(nb::handle stream, int threads) const {
  Binding& bind = Binding::get();
  for (std::size_t j = 0; j < watched_.size(); ++j)
    if (!states_.unchanged(bind.reader(), j, watched_[j].obj))
      throw Error(watched_[j].name, -1,
                  "changed since this DualGemm was built: its data_ptr(), shape, strides or dtype differ (set_(), "
                  "resize_(), .data = ...). The plan is bound to the old memory and layout; build a new DualGemm");
  if (plan_ && copied_.changed())
    throw Error(copied_names_.empty() ? "sfb1" : copied_names_.front(), -1,
                "a weight scale array (sfb1 / sfb2) was changed in place since this DualGemm was built, but the plan "
                "pairs gate and up scales in its own copy made then: build a new DualGemm, or pass "
                "rescale_each_run=True (every run reads the scales as they are)");
  if (plan_) {
    const cudaStream_t s = bind.resolve_stream(stream, framework_, device_);
    bind.run(plan_, s, Binding::is_capturing(s));
    return;
  }
  if (cuda_) return;  // no groups
  // Host arrays: the kernel's own FP32 epilogue on exact products, one expert per group.
  const reference::DualActivation act{options_.epilogue == Epilogue::silu ? reference::Activation::silu
                                                                         : reference::Activation::swigluoai,
                                      options_.swiglu_alpha, options_.swiglu_limit};
  nb::gil_scoped_release release;
  for (const GroupDesc& d : groups_) {
    if (d.m == 0) continue;
    const int vec = scale_block_size(options_.format), cols = d.k / vec;
    // The reference reads linear scales.
    std::vector<std::uint8_t> sa, sb, su;
    const std::uint8_t *a_s = static_cast<const std::uint8_t*>(d.sfa), *b_s = static_cast<const std::uint8_t*>(d.sfb),
                       *u_s = static_cast<const std::uint8_t*>(d.sfb_up);
    if (options_.scale_layout == ScaleLayout::blocked) {
      auto lin = [&](const std::uint8_t* src, int rows, std::vector<std::uint8_t>& out) {
        out.resize(static_cast<std::size_t>(rows) * cols);
        formats::blocked_to_linear(src, rows, cols, out.data());
        return out.data();
      };
      a_s = lin(a_s, d.m, sa), b_s = lin(b_s, d.n, sb), u_s = lin(u_s, d.n, su);
    }
    const float al = d.alpha, au = d.alpha_up;  // (host arrays: alphas are host values)
    const int offsets[2] = {0, d.m};
    reference::MoeHostProblem rp;
    rp.experts = 1, rp.n = d.n, rp.k = d.k, rp.format = options_.format;
    rp.a = static_cast<const std::uint8_t*>(d.a), rp.lda = d.lda, rp.a_scales = a_s, rp.a_rows = d.m;
    rp.w = static_cast<const std::uint8_t*>(d.b), rp.ldw = d.ldb, rp.w_scales = b_s, rp.w_layout = ScaleLayout::linear;
    rp.alpha = &al, rp.alpha_up = &au, rp.offsets = offsets, rp.c = d.c, rp.ldc = d.ldc, rp.out_type = options_.out_type;
    rp.glu = &act, rp.gate_up = static_cast<int>(GateUpLayout::separate), rp.glu_fp32 = true;
    rp.w_up = static_cast<const std::uint8_t*>(d.b_up), rp.w_up_scales = u_s;
    reference::moe_gemm(rp, threads);
  }
}

// ---- fp4gemm.dual_gemm: one call, behind the binding's call memo and plan cache ----------------------

namespace {

// GPU MODE's batched arrays: each entry of the seven lists with its batch count l as the trailing
// dimension; the lists with every entry of l > 1 replaced by its l views along it (entries of l 1 kept).
struct Batches {
  std::vector<nb::object> lists;                // a, b1, b2, sfa, sfb1, sfb2, c
  std::vector<std::pair<int, long long>> from;  // per expanded group: (given group, batch)
};

const char* const kDualLists[7] = {"a", "b1", "b2", "sfa", "sfb1", "sfb2", "c"};

Batches expand_batches(const DualCall& given) {
  const int G = given.gate.groups;
  std::vector<nb::list> out(7);
  Batches b;
  for (int g = 0; g < G; ++g) {
    // (given.objects: the gate's a, b1, sfa, sfb1, c per group, then b2, sfb2 per group)
    const std::vector<PyObject*>& o = given.objects;
    const std::size_t gi = static_cast<std::size_t>(g) * kPerGroup, ui = static_cast<std::size_t>(G) * kPerGroup + 2 * g;
    const nb::handle t[7] = {o[gi], o[gi + 1], o[ui], o[gi + 2], o[gi + 3], o[ui + 1], o[gi + 4]};
    auto name = [&](int f) { return std::string(kDualLists[f]) + "[" + std::to_string(g) + "]"; };
    // (Python errors -- an object without an integer shape, a failing __getitem__ -- are named)
    auto guarded = [&](int f, auto&& body) {
      try {
        return body();
      } catch (const nb::python_error& e) {
        throw Error(name(f), g, std::string("cannot be split along its batch dimension: ") + e.what());
      } catch (const nb::cast_error&) {
        throw Error(name(f), g, "has a shape whose last entry is not an integer batch count");
      }
    };
    auto batches = [&](int f) -> long long {
      return guarded(f, [&] {
        nb::object shape = nb::getattr(t[f], "shape", nb::none());
        if (shape.is_none() || nb::len(shape) < 1) throw Error(name(f), g, "has no batch dimension (GPU MODE's trailing l)");
        return nb::cast<long long>(shape[nb::len(shape) - 1]);
      });
    };
    const long long l = batches(0);
    for (int f = 1; f < 7; ++f)
      if (batches(f) != l)
        throw Error(name(f), g, "has " + std::to_string(batches(f)) + " batches (its trailing dimension) but a has " +
                                    std::to_string(l));
    for (long long i = 0; i < (l == 1 ? 1 : l); ++i) b.from.emplace_back(g, i);
    for (int f = 0; f < 7; ++f) {
      if (l == 1) {
        out[f].append(t[f]);
        continue;
      }
      guarded(f, [&] {
        for (long long i = 0; i < l; ++i) out[f].append(t[f][nb::make_tuple(nb::ellipsis(), i)]);
        return 0;
      });
    }
  }
  b.lists.assign(out.begin(), out.end());
  return b;
}

// Whether the expanded call's views are exactly the given arrays' batches (views into the same
// memory: address + i * the batch stride, the other dimensions as given). Only then may the memo
// stand for the views by the given arrays' states.
bool views_are_batches(const DualCall& given, const std::vector<TensorView>& parents, const DualCall& call,
                       const Batches& b) {
  // list k (kDualLists order) of group g among a call's views: the gate's five per group, then (b2, sfb2) per group
  static constexpr int kGate[7] = {0, 1, -1, 2, 3, -1, 4};
  auto at = [](const std::vector<TensorView>& v, int groups, int g, int k) -> const TensorView& {
    return kGate[k] >= 0 ? v[static_cast<std::size_t>(g) * kPerGroup + kGate[k]]
                         : v[static_cast<std::size_t>(groups) * kPerGroup + 2 * g + (k == 2 ? 0 : 1)];
  };
  const int G = given.gate.groups, X = call.gate.groups;
  for (int e = 0; e < X; ++e) {
    const auto [g, i] = b.from[e];
    for (int k = 0; k < 7; ++k) {
      const TensorView &p = at(parents, G, g, k), &v = at(call.views, X, e, k);
      const bool whole = p.ndim == v.ndim;  // (l = 1: the given array itself)
      if (whole ? !same_view(p, v)
                : (v.ndim != p.ndim - 1 || v.dtype != p.dtype || v.itemsize != p.itemsize ||
                   v.ptr != p.ptr + static_cast<std::uintptr_t>(i * p.strides[p.ndim - 1] * p.itemsize) ||
                   !std::equal(v.shape, v.shape + v.ndim, p.shape) || !std::equal(v.strides, v.strides + v.ndim, p.strides)))
        return false;
    }
  }
  return true;
}

}  // namespace

void Binding::dual_gemm(nb::handle a, nb::handle b1, nb::handle b2, nb::handle sfa, nb::handle sfb1, nb::handle sfb2,
                        nb::handle c, nb::handle format, nb::handle scale_layout, nb::handle out_dtype,
                        const std::string& activation, float swiglu_alpha, float swiglu_limit, nb::handle stream,
                        int threads, bool batches) {
  const CallOptions options = parse_options(format, scale_layout, out_dtype, nb::none());
  const Epilogue epilogue = dual_activation(activation);
  DualCall given(*this, a, b1, b2, sfa, sfb1, sfb2, c);
  if (given.gate.groups == 0) return;
  // What the plan depends on beyond the two products' keys: the epilogue and the constants it uses.
  std::vector<std::uint64_t> plan_words = {0x6475616cull /* "dual" */, static_cast<std::uint64_t>(epilogue)};
  if (epilogue == Epilogue::swigluoai) plan_words.insert(plan_words.end(), {float_bits(swiglu_alpha), float_bits(swiglu_limit)});
  // The memo's signature: the grouped GEMM's words, then these (a dual call never matches a grouped
  // one: the marker word is no format, and its object list is longer by 2 per group).
  std::vector<std::uint64_t> extra = plan_words;
  extra.push_back(batches ? 1u : 0u);
  std::vector<std::uint64_t> signature;
  std::uint64_t sig_hash = 0;
  bool memoizable = false;
  if (try_memo(options, nb::none(), given.objects, stream, signature, sig_hash, memoizable, extra)) return;
  // batches: the groups come from the batch views, made here (only when the call is planned); the
  // memo keeps the given arrays, whose states -- read now, before anything can run Python code or
  // release the GIL -- stand for the views (checked below).
  std::vector<TensorView> given_views;
  Keepalive given_keep;
  if (batches && memoizable)
    for (PyObject* obj : given.objects) given_views.push_back(reader_.read(obj, "data", -1, false, given_keep, false));
  Batches split;
  std::optional<DualCall> expanded;
  auto renamed_batch = [&](auto&& body) {  // errors of the expanded call name the given group and batch
    try {
      body();
    } catch (const Error& e) {
      const std::string arg = e.argument();
      const std::size_t open = arg.find('[');
      const int x = e.group();
      if (open == std::string::npos || x < 0 || x >= static_cast<int>(split.from.size())) throw;
      const auto [g, i] = split.from[x];
      throw Error(arg.substr(0, open) + "[" + std::to_string(g) + "]", g,
                  "(batch " + std::to_string(i) + ") " + bare_message(e));
    }
  };
  if (batches) {
    split = expand_batches(given);
    const std::vector<nb::object>& l = split.lists;
    renamed_batch([&] { expanded.emplace(*this, l[0], l[1], l[2], l[3], l[4], l[5], l[6]); });
  }
  DualCall& call = batches ? *expanded : given;
  renamed_batch([&] { call.prepare(*this, options, nb::none(), nb::none()); });
  if (batches && memoizable && !views_are_batches(given, given_views, call, split)) memoizable = false;
  // Every run reads the scales as they are (rescale_each_run): a one-call API cannot see in-place
  // writes to the scale arrays, so the plan keeps no paired copy of them.
  const Options o = call.library_options(options, epilogue, swiglu_alpha, swiglu_limit, /*rescale_each_run=*/true);
  if (!call.pg.placement.cuda) {  // host arrays: the CPU reference, as DualGemm runs it
    const std::array<nb::handle, 7> in = batches ? std::array<nb::handle, 7>{split.lists[0], split.lists[1], split.lists[2],
                                                                             split.lists[3], split.lists[4], split.lists[5],
                                                                             split.lists[6]}
                                                 : std::array<nb::handle, 7>{a, b1, b2, sfa, sfb1, sfb2, c};
    DualGemmObject(in[0], in[1], in[2], in[3], in[4], in[5], in[6], nb::none(), nb::none(), format, scale_layout, out_dtype,
                   activation, swiglu_alpha, swiglu_limit, true)
        .run(nb::none(), threads);
    return;
  }
  const cudaStream_t s = resolve_stream(stream, call.pg.framework, call.pg.placement.device);
  const bool capturing = is_capturing(s);
  std::vector<std::uint64_t> key = call.pg.key;
  key.insert(key.end(), call.pu.key.begin(), call.pu.key.end());
  key.insert(key.end(), plan_words.begin(), plan_words.end());
  const std::uint64_t h = hash_words(key);
  PlanPtr plan;
  {
    std::lock_guard lock(mutex_);
    plan = plans_.find(key, h);
    ++(plan ? hits_ : misses_);
  }
  if (!plan) {
    PlanPtr built = build_outside_capture(capturing, [&] {
      return std::make_shared<const Plan>(std::span<const GroupDesc>(call.groups), o, s);
    });
    std::vector<PlanPtr> evicted;
    std::lock_guard lock(mutex_);
    plan = plans_.insert(std::move(key), h, std::move(built), /*may_evict=*/!capturing, evicted);
  }
  if (memoizable) {
    if (batches) remember(std::move(signature), sig_hash, given.objects, given_views, plan, call.pg.placement.device, capturing);
    else remember(std::move(signature), sig_hash, call.objects, call.views, plan, call.pg.placement.device, capturing);
  }
  run(plan, s, capturing);
}

std::string DualGemmObject::describe() const {
  if (plan_) return plan_->describe();
  return "CPU reference (host arrays): " + std::to_string(groups_.size()) + " dual GEMM groups, " +
         to_string(options_.format) + " -> " + to_string(options_.out_type) + ", " + to_string(options_.epilogue);
}

double DualGemmObject::flops() const {
  double f = 0;
  for (const GroupDesc& d : groups_) f += 4.0 * d.m * d.n * d.k;
  return f;
}

}  // namespace fp4gemm::python
