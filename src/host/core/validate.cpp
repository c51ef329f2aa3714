// Validation of grouped-GEMM descriptions (SPEC §6): every failure names the argument and group.
//
// What is accepted (documented here once; the public header points at it):
//   - An empty group list is valid and runs nothing.
//   - A group with M == 0 is skipped: only M >= 0 is checked, its other fields (pointers
//     included) are ignored and may be null.
//   - Otherwise N >= 1, K >= 1, K a multiple of the scale block (16 NVFP4, 32 MXFP4);
//     lda, ldb (bytes) >= K/2 and multiples of 16; ldc (elements) >= N and a multiple of 8;
//     a, b, sfa, sfb, c non-null and 16-byte aligned; alpha_device (optional) 4-byte aligned;
//     alpha finite unless alpha_device overrides it.
//   - Limits: every row stride is below 2^40 bytes (a TMA descriptor's stride limit), and every
//     buffer's extent (e.g. (M-1)*lda + K/2 bytes) fits int64 and does not wrap the address
//     space. M, N, K are ints, so the scale sizes always fit.
//   - Outputs of distinct groups must not overlap, and no output may overlap any input (A, B,
//     SFA, SFB, alpha_device) of any group. Buffers are compared as the byte interval from the
//     first to the last byte they touch, so outputs interleaved column-wise inside one larger
//     strided buffer are (conservatively) rejected. Inputs may alias each other freely.
//   - With `check_pointers`, every pointer must be device memory of the plan's device, or
//     managed memory, and every byte range the kernels touch ([begin, end) above; blocked scales
//     pad rows to 128 and scale columns to 4) must lie inside mapped device allocations
//     (cuMemGetAddressRange; virtual-memory chunks mapped side by side, as torch's expandable
//     segments map them, count as one).
//     A sub-allocation of a caching allocator is only checked against its whole segment.
//   - Dual GEMMs (options.epilogue silu / swigluoai): the fast backend; swiglu_alpha finite,
//     swiglu_limit > 0 (not NaN); per group N a multiple of 8, b_up and sfb_up as b and sfb
//     (non-null, 16-byte aligned, the same extents: b_up with row stride ldb), b and b_up
//     distinct (and, with check_pointers, less than 2^40 bytes apart: one TMA map reads both), alpha_up finite unless alpha_up_device (4-byte
//     aligned) overrides it; b_up, sfb_up, alpha_up_device are inputs for the overlap rules.
//   - options.tuning (measurement knobs): every set field in its documented range
//     (fp4gemm/tuning.hpp), whatever the backend.
#include "host/core/validate.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "host/core/schedule.hpp"
#include "fp4gemm/formats.hpp"

namespace fp4gemm::detail {
namespace {

// TMA (cuTensorMapEncodeTiled) requires every global stride to be below 2^40 bytes.
constexpr std::int64_t kMaxStrideBytes = std::int64_t{1} << 40;
constexpr std::uintptr_t kPointerAlignment = 16;

std::string group_arg(int g, const char* field) {
  return "groups[" + std::to_string(g) + "]." + field;
}

[[noreturn]] void fail(int g, const char* field, const std::string& message) {
  throw Error(group_arg(g, field), g, message);
}

std::string hex(std::uintptr_t p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(p));
  return buf;
}

// A buffer a group reads or writes: the bytes [begin, end).
struct Range {
  std::uintptr_t begin = 0, end = 0;
  int group = -1;
  const char* field = "";
};

std::string describe(const Range& r) {
  return group_arg(r.group, r.field) + " [" + hex(r.begin) + ", " + hex(r.end) + ")";
}

// Extent of `rows` rows of `row_bytes` bytes with stride `stride_bytes`: (rows-1)*stride + row.
// Fails (naming `stride_field`) when it overflows int64 or the pointer arithmetic wraps.
Range strided_range(int g, const char* field, const char* stride_field, const void* base,
                    std::int64_t rows, std::int64_t stride_bytes, std::int64_t row_bytes) {
  std::int64_t extent = 0;
  if (__builtin_mul_overflow(rows - 1, stride_bytes, &extent) ||
      __builtin_add_overflow(extent, row_bytes, &extent))
    fail(g, stride_field,
         "the buffer size " + std::to_string(rows) + " rows x " + std::to_string(stride_bytes) +
             " bytes overflows 64-bit sizes");
  const auto begin = reinterpret_cast<std::uintptr_t>(base);
  std::uintptr_t end = 0;
  if (__builtin_add_overflow(begin, static_cast<std::uintptr_t>(extent), &end))
    fail(g, field, "the buffer at " + hex(begin) + " of " + std::to_string(extent) +
                       " bytes wraps around the address space");
  return Range{begin, end, g, field};
}

void check_pointer(int g, const char* field, const void* p, std::uintptr_t alignment,
                   const char* what) {
  if (p == nullptr)
    fail(g, field, std::string("null pointer; ") + what + " must point to device memory when M > 0");
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (address % alignment != 0)
    fail(g, field, "pointer " + hex(address) + " is not " + std::to_string(alignment) +
                       "-byte aligned");
}

void check_row_stride(int g, const char* field, std::int64_t ld, std::int64_t k,
                      const char* matrix) {
  const std::int64_t row_bytes = k / 2;
  if (ld < row_bytes)
    fail(g, field, "row stride of " + std::string(matrix) + " is " + std::to_string(ld) +
                       " bytes, less than one packed row (K/2 = " + std::to_string(row_bytes) +
                       " bytes for K = " + std::to_string(k) + ")");
  if (ld % 16 != 0)
    fail(g, field, "row stride of " + std::string(matrix) + " is " + std::to_string(ld) +
                       " bytes; it must be a multiple of 16 bytes");
  if (ld >= kMaxStrideBytes)
    fail(g, field, "row stride of " + std::string(matrix) + " is " + std::to_string(ld) +
                       " bytes; fp4gemm supports strides below 2^40 bytes (TMA limit)");
}

}  // namespace

// The knobs of Options::tuning (fp4gemm/tuning.hpp): unset ones are the plan's to choose.
void validate_tuning(const Tuning& t) {
  auto fail_tuning = [](const char* field, const std::string& message) {
    throw Error(std::string("options.tuning.") + field, -1, message);
  };
  auto cost = [&](const std::optional<double>& v, const char* field) {
    if (v && !(std::isfinite(*v) && *v >= 0))
      fail_tuning(field, "a schedule cost must be finite and >= 0 (got " + std::to_string(*v) + ")");
  };
  cost(t.wide_fixed, "wide_fixed");
  cost(t.wide_per_token, "wide_per_token");
  cost(t.narrow_fixed, "narrow_fixed");
  cost(t.narrow_per_token, "narrow_per_token");
  cost(t.epilogue_cost, "epilogue_cost");
  cost(t.handoff_cost, "handoff_cost");
  cost(t.owner_cost, "owner_cost");
  if (const auto r = t.class_round; r && *r != 1 && *r != 2 && *r != 4 && *r != 8)
    fail_tuning("class_round", "must be 1, 2, 4 or 8 (got " + std::to_string(*r) + ")");
  if (const auto w = t.tile_tokens; w && (*w < 8 || *w > SchedulePolicy::kMaxTokens))
    fail_tuning("tile_tokens", "must be 8.." + std::to_string(SchedulePolicy::kMaxTokens) + " (got " + std::to_string(*w) + ")");
  if (const auto r = t.narrow_rows; r && *r != 128 && *r != 256)
    fail_tuning("narrow_rows", "must be 128 or 256 (got " + std::to_string(*r) + ")");
  if (const auto n = t.max_ctas; n && *n < 1)
    fail_tuning("max_ctas", "must be >= 1 (got " + std::to_string(*n) + ")");
  for (const auto& [v, field] : {std::pair{t.moe_split_gain16, "moe_split_gain16"}, std::pair{t.moe_split_gain32, "moe_split_gain32"}})
    if (v && !(*v >= 0 && *v <= 100000 && *v == std::floor(*v)))
      fail_tuning(field, "must be a whole number of k-blocks, 0..100000 (got " + std::to_string(*v) + ")");
  if (const auto kb = t.ring_kb; kb && *kb < 0)
    fail_tuning("ring_kb", "must be >= 0 KiB (got " + std::to_string(*kb) + "; values past the limits are clamped)");
}

namespace {

void validate_options(const Options& options) {
  const int format = static_cast<int>(options.format);
  if (format != static_cast<int>(Format::nvfp4) && format != static_cast<int>(Format::mxfp4))
    throw Error("options.format", -1, "unknown format value " + std::to_string(format) +
                                          " (expected nvfp4 or mxfp4)");
  const int layout = static_cast<int>(options.scale_layout);
  if (layout != static_cast<int>(ScaleLayout::linear) && layout != static_cast<int>(ScaleLayout::blocked))
    throw Error("options.scale_layout", -1, "unknown scale layout value " + std::to_string(layout) +
                                                " (expected linear or blocked)");
  const int out = static_cast<int>(options.out_type);
  if (out != static_cast<int>(OutType::f16) && out != static_cast<int>(OutType::bf16) &&
      out != static_cast<int>(OutType::f32))
    throw Error("options.out_type", -1, "unknown output type value " + std::to_string(out) +
                                            " (expected f16, bf16 or f32)");
  const int backend = static_cast<int>(options.backend);
  if (backend != static_cast<int>(Backend::automatic) && backend != static_cast<int>(Backend::fast) &&
      backend != static_cast<int>(Backend::reference))
    throw Error("options.backend", -1, "unknown backend value " + std::to_string(backend) +
                                           " (expected automatic, fast or reference)");
  const int epilogue = static_cast<int>(options.epilogue);
  if (epilogue < 0 || epilogue > static_cast<int>(Epilogue::swigluoai))
    throw Error("options.epilogue", -1, "unknown epilogue value " + std::to_string(epilogue) +
                                            " (expected none, silu or swigluoai)");
  if (options.epilogue != Epilogue::none) {
    if (!std::isfinite(options.swiglu_alpha))
      throw Error("options.swiglu_alpha", -1, "swiglu_alpha must be finite (got " + std::to_string(options.swiglu_alpha) + ")");
    if (!(options.swiglu_limit > 0))
      throw Error("options.swiglu_limit", -1, "swiglu_limit must be > 0 (got " + std::to_string(options.swiglu_limit) + ")");
  }
  if (options.device < -1)
    throw Error("options.device", -1, "device index " + std::to_string(options.device) +
                                          " is invalid (use -1 for the current device)");
  validate_tuning(options.tuning);
  if (options.tuning.moe_split_gain16 || options.tuning.moe_split_gain32)
    throw Error(options.tuning.moe_split_gain16 ? "options.tuning.moe_split_gain16" : "options.tuning.moe_split_gain32",
                -1,
                "a knob of the MoE plans' device schedule (fp4gemm::MoeOptions::tuning); a pointer-array plan does not read it");
}

// Shapes, strides, pointers and alpha of one group (M > 0). Appends its buffers to the lists.
void validate_group(int g, const GroupDesc& d, const Options& options, bool device, std::vector<Range>& inputs,
                    std::vector<Range>& outputs) {
  if (d.n < 1) fail(g, "n", "N must be >= 1 when M > 0 (got " + std::to_string(d.n) + ")");
  if (d.k < 1) fail(g, "k", "K must be >= 1 when M > 0 (got " + std::to_string(d.k) + ")");
  const int vec = scale_block_size(options.format);
  if (d.k % vec != 0)
    fail(g, "k", "K = " + std::to_string(d.k) + " is not a multiple of the " +
                     to_string(options.format) + " scale block (" + std::to_string(vec) + ")");

  check_pointer(g, "a", d.a, kPointerAlignment, "A");
  check_pointer(g, "b", d.b, kPointerAlignment, "B");
  check_pointer(g, "sfa", d.sfa, kPointerAlignment, "the scales of A");
  check_pointer(g, "sfb", d.sfb, kPointerAlignment, "the scales of B");
  check_pointer(g, "c", d.c, kPointerAlignment, "C");
  if (d.alpha_device != nullptr && reinterpret_cast<std::uintptr_t>(d.alpha_device) % alignof(float) != 0)
    fail(g, "alpha_device", "pointer " + hex(reinterpret_cast<std::uintptr_t>(d.alpha_device)) +
                                " is not 4-byte aligned");

  check_row_stride(g, "lda", d.lda, d.k, "A");
  check_row_stride(g, "ldb", d.ldb, d.k, "B");
  const auto elem = static_cast<std::int64_t>(out_type_size(options.out_type));
  if (d.ldc < d.n)
    fail(g, "ldc", "row stride of C is " + std::to_string(d.ldc) + " elements, less than N = " +
                       std::to_string(d.n));
  if (d.ldc % 8 != 0)
    fail(g, "ldc", "row stride of C is " + std::to_string(d.ldc) +
                       " elements; it must be a multiple of 8 elements");
  if (d.ldc >= kMaxStrideBytes / elem)
    fail(g, "ldc", "row stride of C is " + std::to_string(d.ldc) +
                       " elements; fp4gemm supports strides below 2^40 bytes (TMA limit)");

  if (d.alpha_device == nullptr && !std::isfinite(d.alpha))
    fail(g, "alpha", "alpha must be finite (got " + std::to_string(d.alpha) + ")");
  const bool dual = options.epilogue != Epilogue::none;
  if (dual) {
    if (d.n > (1 << 29)) fail(g, "n", "a dual GEMM's N must be at most 2^29 (got " + std::to_string(d.n) + ")");
    if (d.n % 8 != 0)
      fail(g, "n", "a dual GEMM's N must be a multiple of 8 (gate and up rows pair in blocks of 8; got " +
                       std::to_string(d.n) + ")");
    check_pointer(g, "b_up", d.b_up, kPointerAlignment, "the up weights B_up");
    check_pointer(g, "sfb_up", d.sfb_up, kPointerAlignment, "the scales of B_up");
    const auto b = reinterpret_cast<std::uintptr_t>(d.b), b_up = reinterpret_cast<std::uintptr_t>(d.b_up);
    const std::uintptr_t apart = b > b_up ? b - b_up : b_up - b;
    if (apart == 0) fail(g, "b_up", "b and b_up must be distinct buffers (the gate and the up weights)");
    if (device && apart >= static_cast<std::uintptr_t>(kMaxStrideBytes))  // (host arrays: no TMA map)
      fail(g, "b_up", "b and b_up must lie less than 2^40 bytes apart (one TMA map reads both; got " +
                          std::to_string(apart) + " bytes)");
    if (d.alpha_up_device != nullptr && reinterpret_cast<std::uintptr_t>(d.alpha_up_device) % alignof(float) != 0)
      fail(g, "alpha_up_device", "pointer " + hex(reinterpret_cast<std::uintptr_t>(d.alpha_up_device)) +
                                     " is not 4-byte aligned");
    if (d.alpha_up_device == nullptr && !std::isfinite(d.alpha_up))
      fail(g, "alpha_up", "alpha_up must be finite (got " + std::to_string(d.alpha_up) + ")");
  }

  // Sizes. M, N, K are ints, so scale sizes (< 2^31 rows x 2^27 columns, padded) fit int64;
  // strided extents are checked.
  inputs.push_back(strided_range(g, "a", "lda", d.a, d.m, d.lda, d.k / 2));
  inputs.push_back(strided_range(g, "b", "ldb", d.b, d.n, d.ldb, d.k / 2));
  const std::int64_t cols = d.k / vec;
  inputs.push_back(strided_range(g, "sfa", "sfa", d.sfa, 1, 0,
                                 static_cast<std::int64_t>(formats::scale_bytes(options.scale_layout, d.m, cols))));
  inputs.push_back(strided_range(g, "sfb", "sfb", d.sfb, 1, 0,
                                 static_cast<std::int64_t>(formats::scale_bytes(options.scale_layout, d.n, cols))));
  if (d.alpha_device != nullptr)
    inputs.push_back(strided_range(g, "alpha_device", "alpha_device", d.alpha_device, 1, 0, sizeof(float)));
  if (dual) {
    inputs.push_back(strided_range(g, "b_up", "ldb", d.b_up, d.n, d.ldb, d.k / 2));
    inputs.push_back(strided_range(g, "sfb_up", "sfb_up", d.sfb_up, 1, 0,
                                   static_cast<std::int64_t>(formats::scale_bytes(options.scale_layout, d.n, cols))));
    if (d.alpha_up_device != nullptr)
      inputs.push_back(strided_range(g, "alpha_up_device", "alpha_up_device", d.alpha_up_device, 1, 0, sizeof(float)));
  }
  // ldc < 2^40 / elem, so ldc * elem cannot overflow; N * elem neither.
  outputs.push_back(strided_range(g, "c", "ldc", d.c, d.m, d.ldc * elem, std::int64_t{d.n} * elem));
}

bool overlap(const Range& x, const Range& y) { return x.begin < y.end && y.begin < x.end; }

[[noreturn]] void fail_overlap(const Range& out, const Range& other, bool other_is_output) {
  // Name the later group in list order so the report does not depend on addresses.
  const Range& named = (other_is_output && other.group > out.group) ? other : out;
  const Range& partner = (&named == &out) ? other : out;
  const std::string kind = other_is_output ? "the output " : "the input ";
  throw Error(group_arg(named.group, named.field), named.group,
              "the output " + describe(named) + " overlaps " + kind + describe(partner) +
                  (other_is_output ? "; outputs of distinct groups must not overlap"
                                   : "; outputs must not alias any input"));
}

// Outputs pairwise disjoint and disjoint from every input: O((G + I) log I).
void check_overlaps(std::vector<Range>& inputs, std::vector<Range>& outputs) {
  const auto by_begin = [](const Range& x, const Range& y) {
    return x.begin != y.begin ? x.begin < y.begin : x.group < y.group;
  };
  std::sort(outputs.begin(), outputs.end(), by_begin);
  // Sweep: an output overlaps an earlier-starting one iff it starts before the largest end so far.
  std::size_t widest = 0;
  for (std::size_t i = 1; i < outputs.size(); ++i) {
    if (outputs[i].begin < outputs[widest].end) fail_overlap(outputs[i], outputs[widest], true);
    if (outputs[i].end > outputs[widest].end) widest = i;
  }

  std::sort(inputs.begin(), inputs.end(), by_begin);
  // prefix_widest[i]: index of the input with the largest end among inputs[0..i].
  std::vector<std::size_t> prefix_widest(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i)
    prefix_widest[i] = (i == 0 || inputs[i].end > inputs[prefix_widest[i - 1]].end) ? i : prefix_widest[i - 1];
  for (const Range& out : outputs) {
    // Inputs starting before out.end; the widest of them overlaps iff its end > out.begin.
    const auto it = std::lower_bound(inputs.begin(), inputs.end(), out.end,
                                     [](const Range& r, std::uintptr_t v) { return r.begin < v; });
    if (it == inputs.begin()) continue;
    const Range& widest_input = inputs[prefix_widest[static_cast<std::size_t>(it - inputs.begin()) - 1]];
    if (overlap(out, widest_input)) fail_overlap(out, widest_input, false);
  }
}

// Requires device memory of `device` (or managed memory) behind `p`.
void require_device_memory(const std::string& name, int g, const void* p, int device) {
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // do not leave the error for the caller's next CUDA call
    throw Error(name, g, "cannot query pointer " + hex(reinterpret_cast<std::uintptr_t>(p)) + ": " +
                       cudaGetErrorString(err));
  }
  switch (attr.type) {
    case cudaMemoryTypeManaged:
      return;
    case cudaMemoryTypeDevice:
      if (attr.device == device) return;
      throw Error(name, g, "pointer " + hex(reinterpret_cast<std::uintptr_t>(p)) + " is memory of device " +
                         std::to_string(attr.device) + ", but the plan runs on device " +
                         std::to_string(device));
    case cudaMemoryTypeHost:
      throw Error(name, g, "pointer " + hex(reinterpret_cast<std::uintptr_t>(p)) +
                         " is pinned host memory; fp4gemm needs device memory");
    case cudaMemoryTypeUnregistered:
    default:
      throw Error(name, g, "pointer " + hex(reinterpret_cast<std::uintptr_t>(p)) +
                         " is not in any device allocation (a host pointer, or past an allocation's end); "
                         "fp4gemm needs device memory");
  }
}

// A driver function by name, or null when the driver lacks it.
template <typename Fn>
Fn driver_function(const char* name, unsigned version) {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(name, &ptr, version, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess)
    ptr = nullptr;
  (void)cudaGetLastError();
  return reinterpret_cast<Fn>(ptr);
}

struct AllocationQueries {
  PFN_cuMemGetAddressRange_v3020 range = driver_function<PFN_cuMemGetAddressRange_v3020>("cuMemGetAddressRange", 3020);
  PFN_cuMemRetainAllocationHandle_v11000 retain =
      driver_function<PFN_cuMemRetainAllocationHandle_v11000>("cuMemRetainAllocationHandle", 11000);
  PFN_cuMemRelease_v10020 release = driver_function<PFN_cuMemRelease_v10020>("cuMemRelease", 10020);

  // Whether `address` is mapped with the virtual-memory API (cuMemMap), as by allocators that grow
  // a segment by mapping chunks next to each other (torch's expandable segments).
  bool mapped_chunk(std::uintptr_t address) const {
    CUmemGenericAllocationHandle handle{};
    if (retain == nullptr || retain(&handle, reinterpret_cast<void*>(address)) != CUDA_SUCCESS) return false;
    if (release != nullptr) release(handle);
    return true;
  }
};

// Requires the bytes [begin, end) to be inside the device allocation holding `begin`. The range
// may continue into a next allocation only where both are virtual-memory chunks (mapped side by
// side by one allocator): cuMemGetAddressRange reports one chunk of such a segment. `note` explains
// the size (e.g. the scale layout's padding).
void require_mapped(const std::string& name, int g, std::uintptr_t begin, std::uintptr_t end, const std::string& note) {
  if (end <= begin) return;
  static const AllocationQueries queries;
  if (queries.range == nullptr)
    throw Error("device", -1, "the CUDA driver has no cuMemGetAddressRange (driver too old?)");
  const std::string what = "needs the " + std::to_string(end - begin) + " bytes [" + hex(begin) + ", " + hex(end) +
                           ")" + (note.empty() ? "" : " (" + note + ")");
  std::uintptr_t covered = begin;
  while (covered < end) {
    CUdeviceptr base = 0;
    std::size_t size = 0;
    const bool next_chunk = covered != begin;
    if ((next_chunk && !(queries.mapped_chunk(covered - 1) && queries.mapped_chunk(covered))) ||
        queries.range(&base, &size, static_cast<CUdeviceptr>(covered)) != CUDA_SUCCESS || size == 0) {
      if (!next_chunk) throw Error(name, g, what + ", but " + hex(covered) + " is not inside a device allocation");
      throw Error(name, g, what + ", but its allocation ends at " + hex(covered) + ", " +
                               std::to_string(end - covered) + " bytes short");
    }
    covered = static_cast<std::uintptr_t>(base + size);
  }
}

void check_allocation(const Range& r, const Options& options) {
  const std::string field = r.field;
  std::string note;
  if (field == "sfa" || field == "sfb" || field == "sfb_up")
    note = std::string(to_string(options.scale_layout)) + " scales" +
           (options.scale_layout == ScaleLayout::blocked ? ": rows padded to 128, scale columns to 4" : "");
  require_mapped(group_arg(r.group, r.field), r.group, r.begin, r.end, note);
}

}  // namespace

void check_device_buffer(const std::string& name, int group, const void* p, std::int64_t bytes, int device,
                         const std::string& note) {
  if (p == nullptr) throw Error(name, group, "null pointer; it must point to device memory");
  require_device_memory(name, group, p, device);
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  require_mapped(name, group, begin, begin + static_cast<std::uintptr_t>(bytes), note);
}

void validate_groups(std::span<const GroupDesc> groups, const Options& options, bool check_pointers) {
  validate_options(options);
  if (groups.size() > static_cast<std::size_t>(INT_MAX))
    throw Error("groups", -1, "too many groups (" + std::to_string(groups.size()) + ")");

  std::vector<Range> inputs, outputs;
  inputs.reserve(groups.size() * 5);
  outputs.reserve(groups.size());
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const int g = static_cast<int>(i);
    const GroupDesc& d = groups[i];
    if (d.m < 0) fail(g, "m", "M must be >= 0 (got " + std::to_string(d.m) + ")");
    if (d.m == 0) continue;  // skipped group: nothing is read or written
    validate_group(g, d, options, check_pointers, inputs, outputs);
  }
  // In group order, for the allocation checks below (check_overlaps sorts by address).
  std::vector<Range> touched;
  if (check_pointers) {
    touched = inputs;
    touched.insert(touched.end(), outputs.begin(), outputs.end());
    std::stable_sort(touched.begin(), touched.end(), [](const Range& x, const Range& y) { return x.group < y.group; });
  }
  check_overlaps(inputs, outputs);

  if (!check_pointers) return;
  int device = options.device;
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error("options.device", -1, "cannot determine the current CUDA device");
  }
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const int g = static_cast<int>(i);
    const GroupDesc& d = groups[i];
    if (d.m == 0) continue;
    require_device_memory(group_arg(g, "a"), g, d.a, device);
    require_device_memory(group_arg(g, "b"), g, d.b, device);
    require_device_memory(group_arg(g, "sfa"), g, d.sfa, device);
    require_device_memory(group_arg(g, "sfb"), g, d.sfb, device);
    require_device_memory(group_arg(g, "c"), g, d.c, device);
    if (d.alpha_device != nullptr) require_device_memory(group_arg(g, "alpha_device"), g, d.alpha_device, device);
    if (options.epilogue != Epilogue::none) {
      require_device_memory(group_arg(g, "b_up"), g, d.b_up, device);
      require_device_memory(group_arg(g, "sfb_up"), g, d.sfb_up, device);
      if (d.alpha_up_device != nullptr)
        require_device_memory(group_arg(g, "alpha_up_device"), g, d.alpha_up_device, device);
    }
  }
  for (const Range& r : touched) check_allocation(r, options);
}

}  // namespace fp4gemm::detail
