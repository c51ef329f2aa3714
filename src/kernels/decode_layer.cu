// The MoE layer's decode path (decode_layer.hpp): two kernels assembled from the parts in
// device/decode_stream.cuh -- a warp streams 16 weight rows of one expert over a K part -- with
// two epilogues: GLU into the intermediate rows, and the top-k combine into the output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#ifdef FP4GEMM_TRACE  // (the stream parts' stamps: phases 6-9 below)
namespace fp4gemm::detail { namespace { __device__ void stamp_any(int phase); } }
#define DECODE_STAMP(p) ::fp4gemm::detail::stamp_any(p)
#endif
#include "device/decode_stream.cuh"
#include "device/fast_div.hpp"
#include "device/glu.hpp"
#include "device/ptx/ptx.cuh"
#include "device/quantize_rule.cuh"
#include "formats/scale_layout.hpp"
#include "kernels/decode_layer.hpp"
#include "kernels/launch_config.hpp"

namespace fp4gemm::detail {

namespace {

constexpr int kThreads = 32 * kDecodeWarps;

// ---- trace build: each warp's %globaltimer at each phase of the last launch ----------------
// Phases: 0 entry, 1 routing read (and kernel 1's tokens staged), 2 the ring's first loads issued
// (kernel 2: past its wait for kernel 1), 3 the CTA's stream-K done (its barrier and hand-offs),
// 4 exit (kernel 2: after its combines); inside: 5 kernel 1's tokens staged, and from
// decode_stream.cuh's DECODE_STAMP 6 the CTA's share computed, 7 the first cursor, 8 the ring's
// loads issued, 9 the first chunk multiplied, 10 the warp's last chunk multiplied (its share walked).
#ifdef FP4GEMM_TRACE
constexpr int kTracePhases = 11, kTraceCtas = 264;
__device__ unsigned long long g_decode_trace[2][kTraceCtas][kDecodeWarps][kTracePhases];
__device__ __forceinline__ void stamp(int kernel, int phase) {
  if (threadIdx.x % 32 == 0 && blockIdx.x < kTraceCtas && threadIdx.x / 32 < kDecodeWarps) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    g_decode_trace[kernel][blockIdx.x][threadIdx.x / 32][phase] = t;
  }
}
// The part a kernel-1-sized launch is in: 0 (kernel 1, the fused kernel's gate/up part) or 1 (the fused kernel's down
// + combine part), so that the stream parts' stamps of the fused kernel's second part land under kernel 2.
__shared__ int g_trace_part;
__device__ __forceinline__ void trace_part(int part) {
  if (threadIdx.x == 0) g_trace_part = part;  // (read after the next CTA barrier)
}
__device__ void stamp_any(int phase) {  // (kernel 2's dynamic shared memory is its rings alone; kernel 1's has the tokens too)
  unsigned dyn; asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
  stamp(dyn == kDecodeWarps * decode::kRingBytes ? 1 : g_trace_part, phase);
}
#else
__device__ __forceinline__ void stamp(int, int) {}
__device__ __forceinline__ void trace_part(int) {}
#endif

// Element i of a bias row (bf16 or float); -0 without a bias (x + -0 is x).
__device__ __forceinline__ float bias_at(const void* bias, bool f32, std::int64_t i) {
  if (bias == nullptr) return -0.0f;
  return f32 ? static_cast<const float*>(bias)[i] : __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[i]);
}

// Kernel 1's dynamic shared memory: the launch's tokens staged (tokens x hidden padded to a chunk,
// 16-bit, each row decode::kStagedRowPad bytes longer: decode::XShared), then from the next 1 KB boundary the warps'
// rings.
__host__ __device__ __forceinline__ int staged_row_granules(int hidden) {  // (16-byte granules per staged row)
  return (hidden + decode::kChunk - 1) / decode::kChunk * decode::kChunk / 8 + decode::kStagedRowPad / 16;
}
__host__ __device__ __forceinline__ int staged_bytes(int tokens, int hidden) {
  return tokens * staged_row_granules(hidden) * 16;
}
static_assert(kDecodeMaxStagedBytes == 96 * 1024 + kDecodeMaxTokens * decode::kStagedRowPad, "decode_layer.hpp's pad");
__host__ __device__ __forceinline__ int decode_ring_offset(int tokens, int hidden) {
  return (staged_bytes(tokens, hidden) + 1023) / 1024 * 1024;
}

// ---- routing, read by every CTA (T * k <= 64 pairs) ------------------------------------------
// A "slot" is one expert's weights streamed once for all the tokens that chose it: the pairs of
// key (expert e, occurrence o) -- o counts e among the token's earlier picks, so a token that lists
// an expert twice is in two slots and a slot holds each token at most once (a slot's mma columns
// are the tokens themselves). Slots are numbered in the order of their first pair.
struct Routing {
  int slots;
  int id[kDecodeMaxPairs];                     // the pair's expert, -1 outside [0, E) or past T
  int expert[kDecodeMaxPairs];                 // per slot
  signed char pick[kDecodeMaxPairs][kDecodeMaxTokens];  // per slot and token: j, or -1
  int key[kDecodeMaxPairs];                    // per pair: e * kDecodeMaxPairs + o, or -1 (o < k <= 64)
};
static_assert(kDecodeMaxPairs == 64, "read_routing: one warp, two pairs per lane");
static_assert(kDecodeMaxTokens == 8 && offsetof(Routing, pick) % 4 == 0, "read_routing: a pick row is two ints");

__device__ __forceinline__ int run_tokens(const DecodeLayerArgs& a) {
  return a.token_count != nullptr ? min(a.tokens, max(*a.token_count, 0)) : a.tokens;
}

// Pair q's id as the caller wrote it (int32 or int64).
__device__ __forceinline__ long long pair_id(const DecodeLayerArgs& a, int q) {
  return a.ids_int64 ? static_cast<const long long*>(a.ids)[q] : static_cast<long long>(static_cast<const int*>(a.ids)[q]);
}
// Thread p's pair id (p < the launch's T * k, else -1): a load that can be issued before anything else the CTA waits
// for (it does not depend on the run's token count).
__device__ __forceinline__ long long load_pair_id(const DecodeLayerArgs& a) {
  const int p = threadIdx.x;
  if (p >= kDecodeMaxPairs || p >= a.tokens * a.topk) return -1;
  return pair_id(a, p);
}

// Fills r from the ids load_pair_id read (all threads of the CTA call it; two barriers). Warp 0
// numbers the slots, each lane two pairs (q = lane, lane + 32), straight-line: its token (q / k by a
// 16-bit reciprocal, exact for q < 64) and its key (e, o) from the token's up to 7 earlier picks;
// its slot's first pair (the lowest pair with the same key: __match_any_sync within each half of the
// pairs, and for the second half a scan of the first half's keys, needed only past 32 pairs); the
// slot numbers from two ballots. (Loops with data-dependent trip counts and divisions by k made this
// warp's part ~400 instructions at T 1 while the CTA's other warps waited: docs/PERF.md.)
// One token with every pick a valid expert (the decode step's usual case): slot s is pair s -- each pair has its own key
// (e, o), and it is its key's first pair -- so the slots are written straight from the ids, without warp 0's numbering
// and its barrier.
__device__ void read_routing(const DecodeLayerArgs& a, int T, Routing& r, long long v) {
  const int k = a.topk, P = T * k, p = threadIdx.x;
  const bool valid = p < P && v >= 0 && v < a.experts;
  if (p < kDecodeMaxPairs) r.id[p] = valid ? static_cast<int>(v) : -1;
  if (T == 1) {  // (uniform)
    // written before the barrier that decides (warp 0 rewrites all of it where an id is invalid; an invalid id's
    // expert entry is then never read)
    if (p < k) {
      r.expert[p] = static_cast<int>(v);
      int* row = reinterpret_cast<int*>(r.pick[p]);  // token 0 picks it as its j = p; tokens 1-7 are absent
      row[0] = p | static_cast<int>(0xFFFFFF00u), row[1] = -1;
    }
    if (p == 0) r.slots = k;
    if (__syncthreads_and(p >= k || valid)) return;
  } else {
    __syncthreads();
  }
  if (p < 32) {
    const unsigned inv_k = (65536u + static_cast<unsigned>(k) - 1u) / static_cast<unsigned>(k);  // q / k exact for q < 64
    int key[2], first[2], e[2], tok[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int q = p + 32 * h, t = static_cast<int>((static_cast<unsigned>(q) * inv_k) >> 16), back = q - t * k;
      e[h] = q < P ? r.id[q] : -1;
      tok[h] = t;
      int o = 0;
#pragma unroll
      // (a token's earlier picks: at most top-k - 1, and the host takes this path only for top-k <= kDecodeMaxTokens)
      for (int d = 1; d < kDecodeMaxTokens; ++d) o += d <= back && r.id[max(q - d, 0)] == e[h];
      key[h] = e[h] >= 0 ? e[h] * kDecodeMaxPairs + o : -1;
      r.key[q] = key[h];
    }
    for (int i = p; i < kDecodeMaxPairs * kDecodeMaxTokens / 4; i += 32) reinterpret_cast<int*>(r.pick)[i] = -1;
    __syncwarp();
    // the lowest pair with the same key: within a half by a match; the second half's keys may also
    // be in the first half (then that is lower)
    first[0] = __ffs(__match_any_sync(0xFFFFFFFFu, key[0])) - 1;
    first[1] = 32 + __ffs(__match_any_sync(0xFFFFFFFFu, key[1])) - 1;
    if (P > 32) {  // (warp-uniform)
      int f = first[1];
#pragma unroll
      for (int u = 31; u >= 0; --u) f = r.key[u] == key[1] ? u : f;
      first[1] = f;
    }
    const unsigned lead0 = __ballot_sync(0xFFFFFFFFu, key[0] >= 0 && first[0] == p);
    const unsigned lead1 = __ballot_sync(0xFFFFFFFFu, key[1] >= 0 && first[1] == p + 32);
    auto slot_of = [&](int f) {  // the number of first pairs below pair f
      return f < 32 ? __popc(lead0 & ((1u << f) - 1u)) : __popc(lead0) + __popc(lead1 & ((1u << (f - 32)) - 1u));
    };
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int q = p + 32 * h;
      if (key[h] < 0) continue;
      const int s = slot_of(first[h]);
      r.pick[s][tok[h]] = static_cast<signed char>(q - tok[h] * k);
      if (first[h] == q) r.expert[s] = e[h];
    }
    if (p == 0) r.slots = __popc(lead0) + __popc(lead1);
  }
  __syncthreads();
}

// ---- the wide path's routing (T * k <= kDecodeWideMaxPairs): numbered once by the pre-pass, read by every CTA ------
// A slot is up to 8 pairs of one expert -- its pairs in pair order, 8 per slot -- and its mma columns are those pairs
// (a token that lists an expert twice is two columns). Slots in expert order: deterministic. The same bytes in the
// plan's workspace (written by decode_wide_prep) and in each CTA's shared memory.
struct WideRouting {
  int slots;
  int expert[kDecodeWideMaxPairs];
  short col[kDecodeWideMaxPairs][kDecodeMaxTokens];  // the column's pair, or -1
};
static_assert(sizeof(WideRouting) % 4 == 0, "copied as words");

// The table into shared memory, every thread (ends with a barrier). The whole table, not its first `slots`: one round
// trip instead of two dependent ones.
__device__ __forceinline__ void load_wide_routing(const DecodeLayerArgs& a, WideRouting& r) {
  constexpr int kWords = sizeof(WideRouting) / 4;
  const int* src = static_cast<const int*>(a.route);
  int* dst = reinterpret_cast<int*>(&r);
  constexpr int kPer = (kWords + kThreads - 1) / kThreads;  // (both wide kernels run kThreads threads)
  int v[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int w = static_cast<int>(threadIdx.x) + i * kThreads;
    v[i] = w < kWords ? src[w] : 0;
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int w = static_cast<int>(threadIdx.x) + i * kThreads;
    if (w < kWords) dst[w] = v[i];
  }
  __syncthreads();
}

// A pair's expert as the combine weighs it: the id, or -1 outside [0, E) (the wide path reads the ids again).
__device__ __forceinline__ int pair_expert(const DecodeLayerArgs& a, int q) {
  const long long v = pair_id(a, q);
  return v >= 0 && v < a.experts ? static_cast<int>(v) : -1;
}

// 8 bf16 elements (a 16-byte load of a row: pairs (0,1) (2,3) (4,5) (6,7)) in the kernels' B pairing: stored word p =
// elements (p, p + 4) (decode::pair_position; NVFP4 f16: (0,2) (1,3) (4,6) (5,7)).
template <Format F>
__device__ __forceinline__ uint4 pair_granule(uint4 e) {
  if constexpr (F == Format::nvfp4)
    return make_uint4(__byte_perm(e.x, e.y, 0x5410u), __byte_perm(e.x, e.y, 0x7632u), __byte_perm(e.z, e.w, 0x5410u),
                      __byte_perm(e.z, e.w, 0x7632u));
  else
    return make_uint4(__byte_perm(e.x, e.z, 0x5410u), __byte_perm(e.x, e.z, 0x7632u), __byte_perm(e.y, e.w, 0x5410u),
                      __byte_perm(e.y, e.w, 0x7632u));
}

// The run's tokens into shared memory, `threads` threads from thread 0: 8 elements (16 bytes) per step, re-paired so
// that stored word p = elements (p, p + 4) (decode::pair_position; NVFP4 f16: (0,2) (1,3) (4,6) (5,7)); four steps'
// loads in flight at once. Each granule goes where decode::XShared reads it (staged_granule, rows
// staged_row_granules apart).
template <Format F, bool P>
__device__ __forceinline__ void stage_tokens(const DecodeLayerArgs& a, uint4* x_staged, int T, int H, int hpad, int threads) {
  constexpr int kBatch = 4;
  const int steps = T * (hpad / 8);
  // (v / (hpad / 8) as a multiply: hpad / 8 >= 16, and v * (hpad / 8) < 2^32 -- at most 96 KB of staged tokens)
  const unsigned row_granules = static_cast<unsigned>(hpad / 8), row_magic = 0xFFFFFFFFu / row_granules + 1u;
  auto row_of = [&](int v) { return static_cast<int>(__umulhi(static_cast<unsigned>(v), row_magic)); };
  for (int v0 = threadIdx.x; v0 < steps; v0 += kBatch * threads) {
    uint4 e[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int v = v0 + b * threads, t = row_of(v), j = v - t * static_cast<int>(row_granules);
      e[b] = v < steps && 8 * j < H ? __ldg(reinterpret_cast<const uint4*>(a.x + t * a.ldx + 8 * j))  // (0,1) (2,3) (4,5) (6,7)
                                    : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      int v = v0 + b * threads;
      if (v >= steps) break;
      {  // (weights in pieces: 8-element group j to slot pieces_position(8 j) / 8)
        const int t = row_of(v), j = v - t * static_cast<int>(row_granules);
        v = t * staged_row_granules(H) + decode::staged_granule(P ? decode::pieces_position(8 * j) / 8 : j);
      }
      x_staged[v] = pair_granule<F>(e[b]);
    }
  }
}

// The wide kernel 1's staging: the token rows of this CTA's slots [s_lo, s_lo + rows / 8), row 8 (s - s_lo) + column
// holding the column's token (a column without a pair: not staged, never read), as stage_tokens stores a row.
template <Format F, bool P>
__device__ __forceinline__ void stage_wide_rows(const DecodeLayerArgs& a, const WideRouting& r, uint4* x_staged, int s_lo,
                                                int rows, int H, int hpad, int threads) {
  constexpr int kBatch = 4;
  const int row_granules = hpad / 8, steps = rows * row_granules, k = a.topk;
  for (int v0 = static_cast<int>(threadIdx.x); v0 < steps; v0 += kBatch * threads) {
    uint4 e[kBatch];
    int at[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int v = v0 + b * threads, row = v / row_granules, j = v - row * row_granules;
      const int q = v < steps ? r.col[s_lo + row / 8][row % 8] : -1;
      at[b] = q >= 0 ? row * staged_row_granules(H) + decode::staged_granule(P ? decode::pieces_position(8 * j) / 8 : j) : -1;
      e[b] = q >= 0 && 8 * j < H ? __ldg(reinterpret_cast<const uint4*>(a.x + static_cast<long long>(q / k) * a.ldx + 8 * j))
                                 : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (at[b] >= 0) x_staged[at[b]] = pair_granule<F>(e[b]);
  }
}

// The wide kernel 2's staging: the intermediate rows of this CTA's slots [s_lo, s_lo + rows / 8) -- already in the
// kernels' k order (kernel 1 wrote them so) -- row 8 (s - s_lo) + column, granules placed as decode::XShared reads them,
// zeros past the row's `stored` elements (I, or the pieces' padded row).
__device__ __forceinline__ void stage_wide_inter(const DecodeLayerArgs& a, const WideRouting& r, uint4* x_staged, int s_lo,
                                                 int rows, int kpad, int stored, int threads) {
  constexpr int kBatch = 4;
  const int row_granules = kpad / 8, steps = rows * row_granules;
  for (int v0 = static_cast<int>(threadIdx.x); v0 < steps; v0 += kBatch * threads) {
    uint4 e[kBatch];
    int at[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int v = v0 + b * threads, row = v / row_granules, j = v - row * row_granules;
      const int q = v < steps ? r.col[s_lo + row / 8][row % 8] : -1;
      at[b] = q >= 0 ? row * staged_row_granules(kpad) + decode::staged_granule(j) : -1;
      // (written by kernel 1, whose completion the caller waited for: coherent loads, not the read-only path)
      e[b] = q >= 0 && 8 * j < stored ? decode::XCoherent::load(a.inter_rows + static_cast<long long>(q) * a.inter_ld + 8 * j, 0)
                                      : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (at[b] >= 0) x_staged[at[b]] = e[b];
  }
}

// Kernel 1's named barrier of its W streaming warps after W4A4's late token staging (barrier 0 is __syncthreads).
constexpr int kStagedTokensBarrier = 1;

// ---- kernel 1: gate/up of (slot, 8 intermediates) units, then the GLU ------------------------
// A unit's A rows: gate (g) and up (g + 8) of intermediate 8 ig + g, so a lane holds the gate and
// up of the same (intermediate, token) and the GLU needs no exchange.
// CTA-level stream-K (whole units per CTA, split units handed over in shared memory after one
// barrier; no global fences or atomics).
// Kernel 1's body (decode_gate_up; the fused kernel's first part: no dependent to launch). `records`: kDecodeWarps * 2 *
// 128 floats; x_staged: the dynamic shared memory -- the tokens ([decode tokens][hpad], stored in the B pairing,
// zero-padded), then from a 1 KB boundary the warps' rings (decode_ring_offset).
// W (the wide path): the routing from the pre-pass's table (after waiting for the pre-pass), the tokens read from its
// global copy (decode::XGlobalPadded), the rings from the dynamic shared memory's start.
template <Format F, ScaleLayout L, bool P, bool W = false, class R>
__device__ __forceinline__ void gate_up_part(const DecodeLayerArgs& a, R& r, float* records, uint4* x_staged,
                                             bool fused) {
  const long long id = W ? -1 : load_pair_id(a);  // (in flight with the tokens' loads below)
  const int T = run_tokens(a), k = a.topk;
  const int H = a.hidden, I = a.inter, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int hpad = (H + decode::kChunk - 1) / decode::kChunk * decode::kChunk;
  if constexpr (W) {
    ptx::wait_prerequisites();  // the pre-pass's table and tokens
    load_wide_routing(a, r);
  } else {
  // W4A16: the run's tokens, every CTA its own copy, staged at once (their loads overlap the routing's).
  // W4A4 launches this kernel as a programmatic dependent of the token quantiser: it reads its routing and issues its
  // rings' first copies while the quantiser runs, and stages the quantised tokens only then (`ready` below: measured
  // 0.7-3.2 us faster on the H200 than staging first; for W4A16, staging after the copies measured 0.1-1.2 us slower).
  if (!a.fp4_activations) stage_tokens<F, P>(a, x_staged, T, H, hpad, blockDim.x);
  read_routing(a, T, r, id);  // (ends with a barrier: W4A16's staged tokens are complete too)
  }
  if (r.slots == 0) ptx::wait_prerequisites();  // (no warp streams, none waits in `ready`: the grid still ends after
                                                // its prerequisite)
  stamp(0, 1);
  // Kernel 2 may launch now: its CTAs cannot share an SM with this kernel's (registers), so each starts its routing
  // read and first weight loads where a kernel-1 CTA has exited instead of after the last one (it waits for this
  // grid's completion before reading the intermediate).
  if (!fused) ptx::launch_dependents();
  const int groups = I / 8;
  const FastDiv gdiv(static_cast<unsigned>(groups));  // (a unit's slot at each unit change: fast_div.hpp)
  // W: this CTA's slots, as stream_units_cta shares the units (staged_rows: the rows its share needs)
  int s_lo = 0, staged_rows = 0;
  if constexpr (W) {
    const decode::CtaUnits cu = decode::cta_units(r.slots * groups, 0);
    if (cu.u1 > cu.u0) s_lo = cu.u0 / groups, staged_rows = 8 * ((cu.u1 - 1) / groups - s_lo + 1);
  }
  const decode::Operand op{H, H / (F == Format::nvfp4 ? 16 : 32), a.zero_row};
  // rows: [E][2I][H / 2]; pieces: [E][I / 8 blocks of 8 gate and their 8 up rows][hpad / 128 chunks][1 KB]
  const std::int64_t w_stride = P ? std::int64_t{I / 8} * (hpad / decode::kChunk) * 1024 : std::int64_t{2} * I * (H / 2);
  auto unit_of = [&](int u) {
    const int s = static_cast<int>(gdiv.div(static_cast<unsigned>(u))), i = (u - s * groups) * 8 + g, e = r.expert[s];
    const int gate = a.interleaved ? 2 * i : i, up = a.interleaved ? 2 * i + 1 : I + i;
    // an absent token's column is never stored: it multiplies token 0's row
    const void* xs;
    if constexpr (W) {  // (column 0 of a slot always has a pair)
      xs = x_staged + (8 * (s - s_lo) + (r.col[s][g] >= 0 ? g : 0)) * staged_row_granules(H);
    } else {
      const int j = r.pick[s][g];
      xs = x_staged + (j >= 0 ? g : 0) * staged_row_granules(H);
    }
    if constexpr (P) {
      const std::uint8_t* w = a.w13 + e * w_stride + std::int64_t{u - s * groups} * (hpad / decode::kChunk) * 1024 + 16 * lane;
      return decode::Unit{w, w + 512, a.s13 + e * a.s13_stride, xs, gate, up};
    } else {
      const std::uint8_t* w = a.w13 + e * w_stride;
      return decode::Unit{w + std::int64_t{gate} * (H / 2), w + std::int64_t{up} * (H / 2), a.s13 + e * a.s13_stride,
                          xs, gate, up};
    }
  };
  const GluParams act = glu_params(a.glu_kind, a.glu_alpha, a.glu_limit);
  auto finish = [&](int u, float(&v)[4]) {  // v: (gate, token 2c), (gate, 2c + 1), (up, 2c), (up, 2c + 1)
    const int s = static_cast<int>(gdiv.div(static_cast<unsigned>(u))), i = (u - s * groups) * 8 + g, e = r.expert[s];
    const float ag = a.alpha13 != nullptr ? a.alpha13[e] : a.alpha13_s;
    const float au = a.alpha13_up != nullptr ? a.alpha13_up[e] : a.alpha13 != nullptr ? ag : a.alpha13_up_s;
    // the biases of the unit's gate and up rows (the general path's epilogue: fma(acc, alpha, bias))
    const std::int64_t b0 = std::int64_t{e} * 2 * I;
    const float bg = bias_at(a.bias13, a.bias_f32, b0 + (a.interleaved ? 2 * i : i));
    const float bu = bias_at(a.bias13, a.bias_f32, b0 + (a.interleaved ? 2 * i + 1 : I + i));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int t = 2 * c + h;
      if constexpr (W) {
        if (const int q = r.col[s][t]; q >= 0)
          a.inter_rows[std::int64_t{q} * (P ? a.inter_ld : I) + decode::pair_position_of<F, P>(i)] =
              __float2bfloat16_rn(glu_apply(fmaf(v[h], ag, bg), fmaf(v[2 + h], au, bu), act));
      } else if (const int j = r.pick[s][t]; j >= 0) {  // stored in the B pairing kernel 2 reads
        a.inter_rows[std::int64_t{t * k + j} * (P ? a.inter_ld : I) + decode::pair_position_of<F, P>(i)] =
            __float2bfloat16_rn(glu_apply(fmaf(v[h], ag, bg), fmaf(v[2 + h], au, bu), act));
      }
    }
  };
  auto ready = [&](int nw) {  // (called by the nw streaming warps, each once its ring's first copies are issued)
    if constexpr (W) {  // the CTA's slots' tokens, staged while the rings' first copies fly
      stage_wide_rows<F, P>(a, r, x_staged, s_lo, staged_rows, H, hpad, 32 * nw);
      ptx::named_barrier_sync(kStagedTokensBarrier, 32 * nw);
    } else if (a.fp4_activations) {
      ptx::wait_prerequisites();  // the token quantiser's output
      stage_tokens<F, P>(a, x_staged, T, H, hpad, 32 * nw);
      ptx::named_barrier_sync(kStagedTokensBarrier, 32 * nw);
    }
    stamp(0, 2);
  };
  decode::stream_units_cta<F, L, P, decode::XShared, false>(r.slots * groups, 0, hpad / decode::kChunk, op, unit_of,
                                                            ready, finish, records,
                                                            reinterpret_cast<std::uint8_t*>(x_staged) +
                                                                (W ? a.wide_ring_offset : decode_ring_offset(a.tokens, H)));
}

template <Format F, ScaleLayout L, bool P, bool W = false>
__global__ void __launch_bounds__(kThreads, 1) decode_gate_up(const DecodeLayerArgs a) {
  stamp(0, 0);
  trace_part(0);
  __shared__ std::conditional_t<W, WideRouting, Routing> r;
  __shared__ __align__(16) float records[kDecodeWarps * 2 * 128];
  extern __shared__ __align__(1024) uint4 x_staged[];
  gate_up_part<F, L, P, W>(a, r, records, x_staged, false);
  stamp(0, 3);
  stamp(0, 4);
}

// ---- kernel 2: down rows of (16 rows, slot) units, then the top-k combine ---------------------
// A unit's y (alpha times the FP32 sum, rounded to bf16: the layer's y) goes to y_rows per pair;
// after its barrier each CTA arrives once per 16-row block it touched, and the CTA that completes a
// block combines its rows for every token: pairs in j order, one FP32 fma each, as the layer's
// combine.

// The routing weights of 8 pairs, as the run gives them (bf16 or float): the combines' loads, one round trip.
__device__ __forceinline__ void load_pair_weights(const DecodeLayerArgs& a, const int (&pair)[8], float (&wt)[8]) {
  if (a.weights_bf16) {
#pragma unroll
    for (int q = 0; q < 8; ++q) wt[q] = __bfloat162float(static_cast<const __nv_bfloat16*>(a.weights)[pair[q]]);
  } else {
#pragma unroll
    for (int q = 0; q < 8; ++q) wt[q] = static_cast<const float*>(a.weights)[pair[q]];
  }
}

// The 16-row block b for tokens 2 tp and 2 tp + 1 (one warp): every pair's y rows to the output, pairs in j order, one
// FP32 fma each, as the layer's combine. id_of(pair): the pair's expert, or -1 (unrouted, or outside [0, E)). (T, H,
// k, lane: the run's tokens, a.hidden, a.topk, the thread's lane -- the caller's values.)
template <class IdOf>
__device__ __forceinline__ void combine_block(const DecodeLayerArgs& a, int T, int H, int k, int lane, int b, int tp,
                                              IdOf id_of) {
  const int row = b * 16 + lane % 16;
  if (const int t = 2 * tp + lane / 16; t < T) {
    float acc = 0.0f;
    // 8 pairs at a time: their loads first, straight-line (an unrouted or missing pair reads a
    // valid row and is masked), then the fmas in j order -- one L2 round trip per 8 pairs
    // instead of one per pair, the same sum
    for (int j0 = 0; j0 < k; j0 += 8) {
      int id[8], pair[8];
      float yv[8], wt[8], bv[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        pair[q] = t * k + min(j0 + q, k - 1);
        id[q] = j0 + q < k ? id_of(pair[q]) : -1;
        yv[q] = __bfloat162float(__ldcg(a.y_rows + std::int64_t{pair[q]} * H + row));
      }
      load_pair_weights(a, pair, wt);
#pragma unroll
      for (int q = 0; q < 8; ++q) bv[q] = -0.0f;  // (x + -0 is x: no bias)
      if (a.bias2 != nullptr && a.bias_f32) {
#pragma unroll
        for (int q = 0; q < 8; ++q) bv[q] = static_cast<const float*>(a.bias2)[std::int64_t{max(id[q], 0)} * H + row];
      } else if (a.bias2 != nullptr) {
#pragma unroll
        for (int q = 0; q < 8; ++q)
          bv[q] = __bfloat162float(static_cast<const __nv_bfloat16*>(a.bias2)[std::int64_t{max(id[q], 0)} * H + row]);
      }
#pragma unroll
      for (int q = 0; q < 8; ++q)
        if (id[q] >= 0) acc = fmaf(wt[q], yv[q] + bv[q], acc);
    }
    a.out[t * a.ldo + row] = __float2bfloat16_rn(acc);
  }
}

constexpr int kRound = 128;  // touched blocks handled per round (a CTA touches ~H / (16 grid) + 3)

// Kernel 2's body (decode_down_combine; the fused kernel's second part, whose routing kernel 1's part read: `fused`).
// XS: where the intermediate is read from; ready(W): called by each streaming warp once its ring's first copies are
// issued, before it reads the intermediate. `records`: kDecodeWarps * 2 * 128 floats; done: kRound ints; ring: the warps'
// rings.
// W (the wide path): the routing from the pre-pass's table (complete: kernel 1 waited for the pre-pass before it let
// this grid launch), the pairs' ids read again by the combine.
template <Format F, ScaleLayout L, bool P, class XS, bool W = false, class R, class Ready>
__device__ __forceinline__ void down_combine_part(const DecodeLayerArgs& a, R& r, float* records, int* done,
                                                  int& n_done, std::uint8_t* ring, Ready ready, bool fused) {
  const long long id = fused || W ? -1 : load_pair_id(a);  // (in flight with the token count's load)
  const int T = run_tokens(a), k = a.topk;
  if constexpr (W) load_wide_routing(a, r);
  else if (!fused) read_routing(a, T, r, id);
  stamp(1, 1);
  const int H = a.hidden, I = a.inter, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int S = r.slots, blocks = H / 16;
  if (S == 0) {  // no pair routed anywhere: every present token's row is zero
    // (still after the prerequisite grid: no CTA of this grid then ends before it, whatever the stream runs next)
    if (!fused) ptx::wait_prerequisites();
    if constexpr (!W)  // (W: decode_wide_combine writes every present token's row, zeros where no pair is routed)
      for (long long q = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; q < static_cast<long long>(T) * H;
           q += static_cast<long long>(gridDim.x) * blockDim.x)
        a.out[(q / H) * a.ldo + q % H] = __float2bfloat16_rn(0.0f);
    return;
  }
  const decode::Operand op{I, I / (F == Format::nvfp4 ? 16 : 32), a.zero_row};
  // rows: [E][H][I / 2]; pieces: [E][H / 16 blocks][ceil(I / 128) chunks][1 KB]
  const int chunks = (I + decode::kChunk - 1) / decode::kChunk;
  const std::int64_t w_stride = P ? std::int64_t{H / 16} * chunks * 1024 : std::int64_t{H} * (I / 2);
  // W: units slot-major (u = s blocks + b), so a CTA's share covers a few slots, whose intermediate rows it stages
  // (s_lo: its first slot; staged_rows: 8 per slot); otherwise block-major (u = b S + s)
  int s_lo = 0, staged_rows = 0;
  if constexpr (W) {
    const decode::CtaUnits cw = decode::cta_units(blocks * S, 0);
    if (cw.u1 > cw.u0) s_lo = cw.u0 / blocks, staged_rows = 8 * ((cw.u1 - 1) / blocks - s_lo + 1);
  }
  const int kpad = (I + decode::kChunk - 1) / decode::kChunk * decode::kChunk;
  const FastDiv udiv(static_cast<unsigned>(W ? blocks : S));  // (a unit's block and slot at each unit change)
  auto block_slot = [&](int u, int& b, int& s) {
    if constexpr (W) s = static_cast<int>(udiv.div(static_cast<unsigned>(u))), b = u - s * blocks;
    else b = static_cast<int>(udiv.div(static_cast<unsigned>(u))), s = u - b * S;
  };
  auto unit_of = [&](int u) {
    int b, s;
    block_slot(u, b, s);
    const int rg = b * 16 + g, rh = rg + 8, e = r.expert[s];
    int j, q = 0;  // (W: the column's pair q, j = q; else the token's pick j, pair g k + j)
    if constexpr (W) q = r.col[s][g], j = q;
    else j = r.pick[s][g];
    if constexpr (W) {  // the staged row (column 0 of a slot always has a pair)
      const void* xs = reinterpret_cast<const uint4*>(ring) - a.wide_ring_offset2 / 16 +
                       (8 * (s - s_lo) + (j >= 0 ? g : 0)) * staged_row_granules(kpad);
      const std::uint8_t* w = P ? a.w2 + e * w_stride + std::int64_t{b} * chunks * 1024 + 16 * lane : a.w2 + e * w_stride;
      if constexpr (P) return decode::Unit{w, w + 512, a.s2 + e * a.s2_stride, xs, rg, rh};
      else return decode::Unit{w + std::int64_t{rg} * (I / 2), w + std::int64_t{rh} * (I / 2), a.s2 + e * a.s2_stride, xs, rg, rh};
    } else if constexpr (P) {
      const void* xs = j >= 0 ? a.inter_rows + std::int64_t{W ? q : g * k + j} * a.inter_ld : a.zero_row;
      const std::uint8_t* w = a.w2 + e * w_stride + std::int64_t{b} * chunks * 1024 + 16 * lane;
      return decode::Unit{w, w + 512, a.s2 + e * a.s2_stride, xs, rg, rh};
    } else {
      const std::uint8_t* w = a.w2 + e * w_stride;
      return decode::Unit{w + std::int64_t{rg} * (I / 2), w + std::int64_t{rh} * (I / 2), a.s2 + e * a.s2_stride,
                          j >= 0 ? a.inter_rows + std::int64_t{W ? q : g * k + j} * I : a.zero_row, rg, rh};
    }
  };
  auto finish = [&](int u, float(&v)[4]) {
    int b, s;
    block_slot(u, b, s);
    const int rg = b * 16 + g, rh = rg + 8, e = r.expert[s];
    const float alpha = a.alpha2 != nullptr ? a.alpha2[e] : a.alpha2_s;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int t = 2 * c + h;
      int j, q = 0;
      if constexpr (W) q = r.col[s][t], j = q;
      else j = r.pick[s][t];
      if (j >= 0) {
        __nv_bfloat16* y = a.y_rows + std::int64_t{W ? q : t * k + j} * H;
        y[rg] = __float2bfloat16_rn(alpha * v[h]);
        y[rh] = __float2bfloat16_rn(alpha * v[2 + h]);
      }
    }
  };
  const int units = blocks * S, n = (I + decode::kChunk - 1) / decode::kChunk;
  // CTA-level stream-K (one whole block per CTA where there are no more blocks than CTAs:
  // decode::cta_units), then per touched 16-row block one arrival of this CTA's unit count unless
  // the block is the CTA's alone; the CTA that completes a block combines it (its warps take the
  // completed blocks in turn).
  // (R8: a unit's rows are g and g + 8 of one 16-row block)
  // W: the intermediate rows of the CTA's slots staged once its streaming warps' first copies are issued (after `ready`:
  // kernel 1's or the quantiser's completion)
  auto ready_w = [&](int nw) {
    ready(nw);
    if constexpr (W) {
      stage_wide_inter(a, r, reinterpret_cast<uint4*>(ring - a.wide_ring_offset2), s_lo, staged_rows, kpad,
                       P ? static_cast<int>(a.inter_ld) : I, 32 * nw);
      ptx::named_barrier_sync(kStagedTokensBarrier, 32 * nw);
    }
  };
  decode::stream_units_cta<F, L, P, XS, true>(units, W ? 0 : S, n, op, unit_of, ready_w, finish, records, ring);
  stamp(1, 3);
  // The arrivals and the in-kernel combine: compiled only where they run (W: decode_wide_combine, over the whole GPU)
  if constexpr (!W) {
    // (the CTA that stored a block's last units combines it)
    auto combine = [&](int b, int tp) { combine_block(a, T, H, k, lane, b, tp, [&](int q) { return r.id[q]; }); };
    const decode::CtaUnits cu = decode::cta_units(units, S);
    const int u0 = cu.u0, u1 = cu.u1;
    if (u1 <= u0) return stamp(1, 4);  // (the whole CTA)
    const int b_lo = u0 / S, b_hi = (u1 - 1) / S;
    for (int base = b_lo; base <= b_hi; base += kRound) {
      if (threadIdx.x == 0) n_done = 0;
      __syncthreads();  // every y row of this CTA stored (first round); the previous round's combines read done[]
      const int b = base + static_cast<int>(threadIdx.x);
      if (threadIdx.x < kRound && b <= b_hi) {
        // One acq_rel arrival per block: its release covers every y row the CTA stored (ordered
        // before it by the barrier above), its acquire the other CTAs' rows for the last arriver,
        // whose combine warps are ordered after it by the barrier below (no sequentially consistent
        // fences: MEMBAR.SC.GPU waited on here, measured).
        const unsigned mine = static_cast<unsigned>(min(u1, (b + 1) * S) - max(u0, b * S));
        if (mine == static_cast<unsigned>(S)) {  // the block is this CTA's alone: no arrival
          done[atomicAdd(&n_done, 1)] = b;
        } else if (ptx::atom_acq_rel_gpu_add(a.count_rows + b, mine) + mine == static_cast<unsigned>(S)) {
          a.count_rows[b] = 0;  // for the next run
          done[atomicAdd(&n_done, 1)] = b;
        }
      }
      __syncthreads();
      // (the warps take (block, token pair) items: one L2 round trip each, all in flight at once where the CTA has as
      // many warps as items)
      const int nd = n_done, tps = (T + 1) / 2;
      for (int i = threadIdx.x / 32; i < nd * tps; i += blockDim.x / 32) combine(done[i / tps], i % tps);
      if (base + kRound <= b_hi) __syncthreads();  // (n_done and done[] are rewritten by the next round)
    }
  }
  stamp(1, 4);
}

template <Format F, ScaleLayout L, bool P, bool W = false>
__global__ void __launch_bounds__(kThreads, 1) decode_down_combine(const DecodeLayerArgs a) {
  stamp(1, 0);
  trace_part(1);  // (a trace build: the wide kernel 2's dynamic shared memory is more than its rings)
  __shared__ std::conditional_t<W, WideRouting, Routing> r;
  __shared__ __align__(16) float records[kDecodeWarps * 2 * 128];
  __shared__ int done[kRound];
  __shared__ int n_done;
  extern __shared__ __align__(1024) uint4 dyn2[];  // the warps' rings
  // The weights do not depend on kernel 1: the first chunks' loads are issued before waiting for
  // its intermediate rows (PDL), overlapping kernel 1's tail.
  auto ready = [](int) { ptx::wait_prerequisites(), stamp(1, 2); };
  // (pieces: rows padded with zeros; W: the CTA's slots' rows staged in shared memory before the rings)
  using XS = std::conditional_t<W, decode::XShared, std::conditional_t<P, decode::XGlobalPadded, decode::XGlobal>>;
  // (W: the combine kernel may launch now; it waits for this grid's completion before it reads anything)
  if constexpr (W) ptx::launch_dependents();
  down_combine_part<F, L, P, XS, W>(a, r, records, done, n_done,
                                    reinterpret_cast<std::uint8_t*>(dyn2) + (W ? a.wide_ring_offset2 : 0), ready, false);
}

// The wide path's combine, after its kernel 2 (a programmatic dependent): the (16-row block, token pair) items spread
// over the grid, one warp each (combine_block; the ids read again: a pair outside [0, E) weighs nothing). Slot-major
// kernel 2 units give every CTA all blocks of a slot or two, so no CTA completes a block early enough to combine it.
constexpr int kCombineThreads = 256;
// combine_block's sums with 8 consecutive rows per lane (16-byte loads and store; a warp covers 256 rows of one token):
// per element the same fmas in the same order, so the same bits, for an eighth of the instructions and loads. Taken
// where it has at least kCombineRows8Items warps' work (ncu, H200: gpt-oss-120b T 128 7.8 -> 5.5 us; with fewer
// items it was slower -- Qwen3-30B-A3B T 16 / 64 4.1 / 5.0 -> 5.4 / 5.5 us, a sixth of the warps each waiting longer)
// (its 16-byte accesses are aligned: the layer checks that out is 16-byte aligned, ld_out a multiple of 8 and H a
// multiple of the format's block; y_rows is the plan's. The biases, which need only their element's alignment, are
// read element by element.)
constexpr int kCombineRows8Items = 1024;
__device__ __forceinline__ void combine_rows8(const DecodeLayerArgs& a, int T, int H, int k, int lane, int t, int span) {
  const int row = span * 256 + 8 * lane;
  if (t >= T || row >= H) return;
  float acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
  for (int j0 = 0; j0 < k; j0 += 8) {
    int id[8], pair[8];
    uint4 yv[8];
    float wt[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      pair[q] = t * k + min(j0 + q, k - 1);
      id[q] = j0 + q < k ? pair_expert(a, pair[q]) : -1;
      yv[q] = __ldcg(reinterpret_cast<const uint4*>(a.y_rows + std::int64_t{pair[q]} * H + row));
    }
    load_pair_weights(a, pair, wt);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      if (id[q] < 0) continue;
      float bv[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) bv[e] = -0.0f;  // (x + -0 is x: no bias)
      if (a.bias2 != nullptr) {
#pragma unroll
        for (int e = 0; e < 8; ++e) bv[e] = bias_at(a.bias2, a.bias_f32, std::int64_t{id[q]} * H + row + e);
      }
      const __nv_bfloat16* yh = reinterpret_cast<const __nv_bfloat16*>(&yv[q]);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = fmaf(wt[q], __bfloat162float(yh[e]) + bv[e], acc[e]);
    }
  }
  uint4 o;
  __nv_bfloat16* oh = reinterpret_cast<__nv_bfloat16*>(&o);
#pragma unroll
  for (int e = 0; e < 8; ++e) oh[e] = __float2bfloat16_rn(acc[e]);
  *reinterpret_cast<uint4*>(a.out + t * a.ldo + row) = o;
}

__global__ void __launch_bounds__(kCombineThreads) decode_wide_combine(const DecodeLayerArgs a) {
  ptx::wait_prerequisites();  // kernel 2's y rows
  const int T = run_tokens(a), lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(gridDim.x) * (kCombineThreads / 32);
  const int first = static_cast<int>(blockIdx.x) * (kCombineThreads / 32) + static_cast<int>(threadIdx.x) / 32;
  if (const int spans = (a.hidden + 255) / 256; spans * T >= kCombineRows8Items) {
    for (int i = first; i < spans * T; i += warps) combine_rows8(a, T, a.hidden, a.topk, lane, i / spans, i % spans);
    return;
  }
  const int tps = (T + 1) / 2, items = a.hidden / 16 * tps;
  for (int i = first; i < items; i += warps)
    combine_block(a, T, a.hidden, a.topk, lane, i / tps, i % tps, [&](int q) { return pair_expert(a, q); });
}

// ---- the fused kernel (W4A16): kernel 1's part, a grid barrier, kernel 2's part ------------------------------------
// Launched cooperatively (every CTA resident at once: one per SM). Kernel 2's part starts in each CTA as soon as its
// gate/up part ends -- its share, cursors and first down-weight copies (into kernel 1's rings, free by then) overlap the
// other CTAs' gate/up tails -- and its warps wait for the grid only before reading the intermediate. The barrier: each
// CTA adds 1 to a 64-bit counter (release, after a CTA barrier that orders its intermediate rows first); a CTA's
// target is (c / G + 1) * G for the counter c read before its own arrival, which lies in [run * G, run * G + G - 1]
// whatever the other CTAs have done; its streaming warps wait (acquire) for the counter to reach it. The intermediate
// is read with coherent loads (written in this grid: not ld.global.nc).
template <Format F, ScaleLayout L, bool P>
__global__ void __launch_bounds__(kThreads, 1) decode_fused(const DecodeLayerArgs a) {
  stamp(0, 0);
  trace_part(0);
  __shared__ Routing r;
  __shared__ __align__(16) float records[kDecodeWarps * 2 * 128];
  __shared__ int done[kRound];
  __shared__ int n_done;
  __shared__ unsigned long long target;  // the counter value at which this run's grid has met
  extern __shared__ __align__(1024) uint4 x_staged[];
  // Thread 0 reads the counter at entry (before its own arrival, after the previous run's: the stream orders them), its
  // latency hidden behind the gate/up part.
  unsigned long long base = 0;
  if (threadIdx.x == 0) base = ptx::ld_relaxed_gpu(a.grid_bar);
  gate_up_part<F, L, P>(a, r, records, x_staged, true);
  // (a ring's last copies -- zero-filled past the share -- may still be landing: kernel 2's part reuses the rings)
  decode::cp_async_wait<0>();
  if (threadIdx.x == 0) target = (base / gridDim.x + 1) * gridDim.x;
  trace_part(1);
  __syncthreads();  // every intermediate row of this CTA stored (the hand-offs' too); records and rings free; target set
  if (threadIdx.x == 0) ptx::red_release_gpu_add(a.grid_bar, 1ull);  // (its release covers the CTA's rows: the barrier)
  stamp(0, 3);
  auto ready = [&](int) {
    if (threadIdx.x % 32 == 0) {  // (warp 0 streams whenever any warp does: W = min(warps, chunks) >= 1)
      const unsigned long long t = target;
      // relaxed polls, then one acquire (each acquire invalidates the SM's L1); a grid that cannot meet -- not every
      // CTA resident -- traps after some seconds instead of hanging
      for (unsigned i = 0; ptx::ld_relaxed_gpu(a.grid_bar) < t; ++i) {
        if (i > (1u << 22)) __trap();
        __nanosleep(64);  // (measured: polling without the sleep was 0.5 % slower)
      }
      (void)ptx::ld_acquire_gpu(a.grid_bar);
    }
    __syncwarp();
    stamp(1, 2);
  };
  using XS = std::conditional_t<P, decode::XCoherentPadded, decode::XCoherent>;
  down_combine_part<F, L, P, XS>(a, r, records, done, n_done,
                                 reinterpret_cast<std::uint8_t*>(x_staged) + decode_ring_offset(a.tokens, a.hidden),
                                 ready, true);
}

// W4A4: the activations as the general path's GEMM reads them -- quantised by the layer's rule
// (global scale gs) and dequantised exactly to bf16 without gs (which the alphas carry) -- in place
// or into `out`, rows [0, rows) of `cols` elements (row stride ld). Pieces (P): the intermediate is stored in the
// pieces' k order (decode::pair_position_of<F, true>); element c of a row is read and written where it is stored.
// One thread per element: a warp holds 32 consecutive elements of one row (cols is a multiple of 32), so a scale
// block (16 or 32 elements) is 16 or 32 lanes and its amax is reduced by shuffles -- every lane's chain is one load,
// the block's reduction, the scale code and its own quotient. (One thread per block was a serial chain of 16-32
// IEEE divisions: 6-10 us per launch at T 1 on the H200, on the decode path's critical path twice.)
// Each element is read and written by the same thread: in place is safe.
template <Format F, bool P = false>
__global__ void __launch_bounds__(256) fake_quantize_rows(const __nv_bfloat16* in, long long ld_in, __nv_bfloat16* out,
                                                          long long ld_out, int rows, int cols, float gs,
                                                          const int* tokens_at, int k) {
  constexpr int vec = F == Format::nvfp4 ? 16 : 32;
  // The next kernel may launch at once: it waits for this grid's completion before reading its output. Launched as a
  // programmatic dependent of its input's producer (the intermediate's quantiser, after kernel 1), this grid waits
  // for that one first (without PDL the wait returns at once).
  ptx::launch_dependents();
  ptx::wait_prerequisites();
  if (tokens_at != nullptr) rows = min(rows, max(*tokens_at, 0) * k);
  const long long total = static_cast<long long>(rows) * cols;  // (a multiple of 32: whole warps in or out)
  const int lane = threadIdx.x % 32;
  const unsigned group = vec == 32 ? 0xFFFFFFFFu : 0xFFFFu << (lane & 16);  // this lane's scale block
  for (long long e = blockIdx.x * 256ll + threadIdx.x; e - lane < total; e += 256ll * gridDim.x) {
    // (32-bit: the plan keeps T x k rows of a hidden or intermediate size below 2^31 elements)
    const int r = static_cast<int>(static_cast<unsigned>(e) / static_cast<unsigned>(cols)), c = static_cast<int>(e) - r * cols;
    const int at = P ? decode::pair_position_of<F, true>(c) : c;
    const float v = __bfloat162float(in[static_cast<long long>(r) * ld_in + at]);
    float amax = fabsf(v);
#pragma unroll
    for (int o = 1; o < vec; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    const bool nan = (__ballot_sync(0xFFFFFFFFu, v != v) & group) != 0u;  // (fmaxf drops NaNs: the rule keeps them)
    const float am = nan ? __int_as_float(0x7FC00000) : amax;
    const std::uint32_t code = F == Format::nvfp4 ? quant::nv_scale_code_exact(am, gs) : quant::mx_scale_code(am);
    const float scale = quant::code_scale<F>(code);
    static constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const std::uint32_t n = quant::element_nibble<F>(v, code, gs);
    const float q = (n & 8u) ? -kE2m1[n & 7u] : kE2m1[n & 7u];
    // exact: e2m1 x scale fits bf16 and (NVFP4: e2m1 x E4M3, the decode kernels' f16) f16
    const long long o = static_cast<long long>(r) * ld_out + at;
    if constexpr (F == Format::nvfp4) {
      reinterpret_cast<__half*>(out)[o] = __float2half_rn(q * scale);
    } else {
      out[o] = __float2bfloat16_rn(q * scale);
    }
  }
}

// ---- the wide path's pre-pass: one CTA numbers the slots -------------------------------------------------------------
// CTA 0 (one thread per pair, P = T * k <= kDecodeWideMaxPairs): each valid pair sets its bit in its expert's 512-bit
// mask (shared memory, E x 64 bytes), so an expert's pair count and a pair's rank among its expert's pairs (lower pair
// indices first) are popcounts; an expert takes ceil(count / 8) slots, numbered in expert order by a CTA scan; the pair
// of rank r is column r % 8 of slot base + r / 8 (the slot's columns past the expert's pairs -1). (Kernel 1's CTAs
// stage the tokens of their own slots.)
constexpr int kPrepThreads = 512;
// An expert's 16 mask words sit kPrepMaskStride words apart: an odd stride puts the experts of a warp's lanes (the
// counting loop's consecutive experts, the ranking's random ones) on different banks -- at 16 they shared two banks.
constexpr int kPrepMaskStride = 17;
constexpr int kPrepBytesPerExpert = 4 * kPrepMaskStride + 8;  // the pre-pass's shared memory per expert: the mask words, a count, a first slot
static_assert(kPrepThreads == kDecodeWideMaxPairs && kDecodeWideMaxPairs == 16 * 32,
              "decode_wide_prep: one thread per pair, each expert's pairs a 16-word mask");
__global__ void __launch_bounds__(kPrepThreads) decode_wide_prep(const DecodeLayerArgs a) {
  ptx::launch_dependents();  // (kernel 1 waits for this grid's completion before reading anything it writes)
  const int T = run_tokens(a), k = a.topk, E = a.experts, tid = static_cast<int>(threadIdx.x);
  {
    extern __shared__ unsigned mask[];  // [E][kPrepMaskStride] words, then per expert its pair count and its first slot
    int* count = reinterpret_cast<int*>(mask + E * kPrepMaskStride);
    int* base = count + E;
    __shared__ int warp_sum[kPrepThreads / 32];
    WideRouting* out = static_cast<WideRouting*>(a.route);
    for (int i = tid; i < E * kPrepMaskStride; i += kPrepThreads) mask[i] = 0u;
    __syncthreads();
    const int pairs = T * k;
    const int e = tid < pairs ? pair_expert(a, tid) : -1;
    if (e >= 0) atomicOr(&mask[e * kPrepMaskStride + tid / 32], 1u << (tid % 32));
    __syncthreads();
    // this thread's experts [tid * per, tid * per + per): counts and slots, then the CTA's exclusive scan of the slots
    const int per = (E + kPrepThreads - 1) / kPrepThreads, words = (pairs + 31) / 32;
    int mine = 0;
    for (int i = 0; i < per; ++i) {
      const int x = tid * per + i;
      if (x >= E) break;
      int n = 0;
      for (int w = 0; w < words; ++w) n += __popc(mask[x * kPrepMaskStride + w]);
      count[x] = n, mine += (n + 7) / 8;
    }
    const int lane = tid % 32, warp = tid / 32;
    int incl = mine;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int v = __shfl_up_sync(0xFFFFFFFFu, incl, o);
      if (lane >= o) incl += v;
    }
    if (lane == 31) warp_sum[warp] = incl;
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kPrepThreads / 32; ++w) {
      before += w < warp ? warp_sum[w] : 0;
      total += warp_sum[w];
    }
    int run = before + incl - mine;
    for (int i = 0; i < per; ++i) {
      const int x = tid * per + i;
      if (x >= E) break;
      base[x] = run, run += (count[x] + 7) / 8;
    }
    __syncthreads();
    if (e >= 0) {
      const int w = tid / 32;
      int rank = __popc(mask[e * kPrepMaskStride + w] & ((1u << (tid % 32)) - 1u));
      for (int v = 0; v < w; ++v) rank += __popc(mask[e * kPrepMaskStride + v]);
      const int slot = base[e] + rank / 8, col = rank % 8;
      out->col[slot][col] = static_cast<short>(tid);
      if (col == 0) {
        out->expert[slot] = e;
        for (int c = count[e] - rank; c < kDecodeMaxTokens; ++c) out->col[slot][c] = -1;
      }
    }
    if (tid == 0) out->slots = total;
  }
  // W4A4: launched as a programmatic dependent of the token quantiser, this grid ends only after it, so kernel 1's one
  // wait covers both (without PDL the wait returns at once)
  ptx::wait_prerequisites();
}

int resident(const void* kernel, int multiprocessors, int smem) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem) != cudaSuccess || per_sm < 1)
    per_sm = 1;
  return per_sm * multiprocessors;
}

// The kernels of a format, weight-scale layout and weight layout (one instantiation each: the scale codes' path is
// compile-time, so each kernel's loop is one copy of its body).
template <template <Format, ScaleLayout, bool> class K>
const void* kernel_of(Format f, bool blocked, bool pieces) {
  if (f == Format::nvfp4 && pieces)
    return blocked ? K<Format::nvfp4, ScaleLayout::blocked, true>::get() : K<Format::nvfp4, ScaleLayout::linear, true>::get();
  if (f == Format::nvfp4)
    return blocked ? K<Format::nvfp4, ScaleLayout::blocked, false>::get() : K<Format::nvfp4, ScaleLayout::linear, false>::get();
  if (pieces)
    return blocked ? K<Format::mxfp4, ScaleLayout::blocked, true>::get() : K<Format::mxfp4, ScaleLayout::linear, true>::get();
  return blocked ? K<Format::mxfp4, ScaleLayout::blocked, false>::get() : K<Format::mxfp4, ScaleLayout::linear, false>::get();
}
template <Format F, ScaleLayout L, bool P>
struct GateUp {
  static const void* get() { return reinterpret_cast<const void*>(decode_gate_up<F, L, P>); }
};
template <Format F, ScaleLayout L, bool P>
struct DownCombine {
  static const void* get() { return reinterpret_cast<const void*>(decode_down_combine<F, L, P>); }
};
template <Format F, ScaleLayout L, bool P>
struct Fused {  // (W4A16 only, whose weights are MXFP4: no NVFP4 instantiation)
  static const void* get() {
    if constexpr (F == Format::nvfp4) return nullptr;
    else return reinterpret_cast<const void*>(decode_fused<F, L, P>);
  }
};
template <Format F, ScaleLayout L, bool P>
struct GateUpWide {
  static const void* get() { return reinterpret_cast<const void*>(decode_gate_up<F, L, P, true>); }
};
template <Format F, ScaleLayout L, bool P>
struct DownCombineWide {
  static const void* get() { return reinterpret_cast<const void*>(decode_down_combine<F, L, P, true>); }
};
const void* kernel1w(Format f, bool blocked, bool pieces) { return kernel_of<GateUpWide>(f, blocked, pieces); }
const void* kernel2w(Format f, bool blocked, bool pieces) { return kernel_of<DownCombineWide>(f, blocked, pieces); }
const void* kernel_prep() { return reinterpret_cast<const void*>(decode_wide_prep); }
const void* kernel1(Format f, bool blocked, bool pieces) { return kernel_of<GateUp>(f, blocked, pieces); }
const void* kernel_fused(Format f, bool blocked, bool pieces) { return kernel_of<Fused>(f, blocked, pieces); }
const void* kernel2(Format f, bool blocked, bool pieces) { return kernel_of<DownCombine>(f, blocked, pieces); }

// Launches `kernel` with `params`, as a programmatic dependent of the stream's previous kernel when `pdl`.
cudaError_t launch(const void* kernel, dim3 grid, dim3 block, void** params, int smem, bool pdl, cudaStream_t s,
                   bool cooperative = false) {
  LaunchConfig l(grid, block, smem, s, pdl);
  if (cooperative) l.cooperative();  // (every CTA resident at once: the fused kernel's grid barrier)
  return cudaLaunchKernelExC(&l.config, kernel, params);
}

// pdl: a programmatic dependent of the stream's previous kernel (which produces `in`).
void fake_quantize(const DecodeLayerArgs& a, const __nv_bfloat16* in, long long ld_in, __nv_bfloat16* out,
                   long long ld_out, int rows, int cols, float gs, int k, bool pdl, cudaStream_t s, bool pieces = false) {
  const long long elements = static_cast<long long>(rows) * cols;  // (one thread each)
  const unsigned grid = static_cast<unsigned>(std::max<long long>(1, std::min<long long>((elements + 255) / 256, 1024)));
  const int* tokens_at = a.token_count;
  void* params[] = {&in, &ld_in, &out, &ld_out, &rows, &cols, &gs, &tokens_at, &k};
  const void* kernel = a.format == Format::nvfp4
                           ? (pieces ? reinterpret_cast<const void*>(fake_quantize_rows<Format::nvfp4, true>)
                                     : reinterpret_cast<const void*>(fake_quantize_rows<Format::nvfp4>))
                           : (pieces ? reinterpret_cast<const void*>(fake_quantize_rows<Format::mxfp4, true>)
                                     : reinterpret_cast<const void*>(fake_quantize_rows<Format::mxfp4>));
  launch(kernel, dim3(grid), dim3(256), params, 0, pdl, s);
}

}  // namespace

int decode_staged_bytes(int tokens, int hidden) { return staged_bytes(tokens, hidden); }

DecodeShape decode_shape(Format format, bool blocked_scales, bool pieces, int multiprocessors, int tokens, int hidden) {
  DecodeShape s;
  constexpr int ring = kDecodeWarps * decode::kRingBytes;
  s.smem1 = decode_ring_offset(tokens, hidden) + ring;
  s.smem2 = ring;
  // The attribute is the kernel's, not the plan's: opt in once for the largest staging any plan
  // uses (setting this plan's size would lower it under an earlier plan with more tokens or a
  // larger H, whose launches then fail; the static records and routing count against the 48 KB
  // default too).
  cudaFuncSetAttribute(kernel1(format, blocked_scales, pieces), cudaFuncAttributeMaxDynamicSharedMemorySize, kDecodeMaxStagedBytes + 1024 + ring);
  cudaFuncSetAttribute(kernel2(format, blocked_scales, pieces), cudaFuncAttributeMaxDynamicSharedMemorySize, ring);
  s.ctas1 = resident(kernel1(format, blocked_scales, pieces), multiprocessors, s.smem1);
  s.ctas2 = resident(kernel2(format, blocked_scales, pieces), multiprocessors, s.smem2);
  // the fused kernel: kernel 1's dynamic shared memory (its rings serve kernel 2's part), one CTA per SM
  // (NVFP4 has none; a failed attribute or query leaves no error behind: the two kernels run instead)
  if (const void* fused = kernel_fused(format, blocked_scales, pieces); fused != nullptr) {
    int per_sm = 0;
    if (cudaFuncSetAttribute(fused, cudaFuncAttributeMaxDynamicSharedMemorySize, kDecodeMaxStagedBytes + 1024 + ring) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fused, kThreads, s.smem1) != cudaSuccess)
      cudaGetLastError();
    else if (per_sm >= 1 && s.ctas1 == multiprocessors && s.ctas2 == multiprocessors)
      s.ctas_fused = multiprocessors;  // (one per SM: the grid barrier needs every CTA resident; the two kernels' grid,
                                       // so the stream-K splits and the results are theirs)
  }
  return s;
}

DecodeWideShape decode_wide_shape(Format format, bool blocked_scales, bool pieces, int multiprocessors) {
  DecodeWideShape s;
  constexpr int ring = kDecodeWarps * decode::kRingBytes;
  // kernel 1 without staged tokens; the pre-pass's shared memory for kDecodeWideMaxExperts experts
  const void* k1w = kernel1w(format, blocked_scales, pieces);
  if (k1w == nullptr) return s;
  const void* k2w = kernel2w(format, blocked_scales, pieces);
  constexpr int kPrepSmemMax = kDecodeWideMaxExperts * kPrepBytesPerExpert;
  // Each kernel's staging: whatever the block's opt-in shared memory leaves beside its static part and the rings
  // (on the H200 ~140 KB: gpt-oss-120b's 24 staged rows of 5.7 KB at 64 tokens just fit).
  int device = 0, optin = 0;
  cudaFuncAttributes f1{}, f2{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaFuncGetAttributes(&f1, k1w) != cudaSuccess || cudaFuncGetAttributes(&f2, k2w) != cudaSuccess) {
    cudaGetLastError();
    return s;
  }
  const int dyn1 = optin - static_cast<int>(f1.sharedSizeBytes), dyn2 = optin - static_cast<int>(f2.sharedSizeBytes);
  const int staged1 = (dyn1 - ring) / 1024 * 1024, staged2 = (dyn2 - ring) / 1024 * 1024;
  if (staged1 <= 0 || staged2 <= 0) return s;
  if (cudaFuncSetAttribute(k1w, cudaFuncAttributeMaxDynamicSharedMemorySize, staged1 + ring) == cudaSuccess &&
      cudaFuncSetAttribute(k2w, cudaFuncAttributeMaxDynamicSharedMemorySize, staged2 + ring) == cudaSuccess &&
      cudaFuncSetAttribute(kernel_prep(), cudaFuncAttributeMaxDynamicSharedMemorySize, kPrepSmemMax) ==
          cudaSuccess) {
    // (smem1 / smem2 stay 0: the plan sets its own need, its staged rows + the rings)
    s.staged1 = staged1, s.staged2 = staged2;
    s.ctas1 = resident(k1w, multiprocessors, staged1 + ring);
    s.ctas2 = resident(k2w, multiprocessors, staged2 + ring);
  } else {
    cudaGetLastError();
  }
  return s;
}

std::size_t decode_wide_route_bytes() { return sizeof(WideRouting); }
int decode_wide_staged_row_bytes(int hidden) { return staged_row_granules(hidden) * 16; }  // (also for K = I)
int decode_wide_ring_bytes() { return kDecodeWarps * decode::kRingBytes; }
bool decode_wide_supported(Format format, bool fp4_activations) { return fp4_activations || format == Format::mxfp4; }

std::string decode_trace_report() {
#ifdef FP4GEMM_TRACE
  static unsigned long long h[2][kTraceCtas][kDecodeWarps][kTracePhases];
  std::memset(h, 0, sizeof(h));
  if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(h, g_decode_trace, sizeof(h)) != cudaSuccess)
    return "decode trace: could not read the counters\n";
  unsigned long long t0 = ~0ull;
  for (int c = 0; c < kTraceCtas; ++c)
    for (int w = 0; w < kDecodeWarps; ++w)
      if (h[0][c][w][0] != 0) t0 = std::min(t0, h[0][c][w][0]);
  if (t0 == ~0ull) return "decode trace: no decode launch recorded\n";
  static const char* kNames[kTracePhases] = {"entry", "routing read", "ring loads issued / waited", "stream-K done",
                                             "exit", "staged", "cta share", "cursor", "ring issued", "first chunk done",
                                             "share walked"};
  std::ostringstream o;
  o << "decode trace (last launch; us from kernel 1's first entry; p10 / median / p90 / latest over warps; the fused\n"
       "kernel's down + combine part under kernel 2, its gate/up part's end, barrier and arrival as kernel 1's stream-K "
       "done):\n";
  for (int k = 0; k < 2; ++k)
    for (int p = 0; p < kTracePhases; ++p) {
      std::vector<double> v;
      for (int c = 0; c < kTraceCtas; ++c)
        for (int w = 0; w < kDecodeWarps; ++w)
          if (h[k][c][w][p] >= t0) v.push_back((h[k][c][w][p] - t0) * 1e-3);
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      o << "  kernel " << k + 1 << " " << kNames[p] << ": " << v[v.size() / 10] << " / " << v[v.size() / 2] << " / "
        << v[v.size() * 9 / 10] << " / " << v.back() << " (" << v.size() << " warps)\n";
    }
  // Where the shares end: per CTA its warps' last "share walked" and their spread (latest - earliest warp), over CTAs.
  for (int k = 0; k < 2; ++k) {
    std::vector<double> last, spread;
    for (int c = 0; c < kTraceCtas; ++c) {
      double lo = 1e30, hi = -1;
      for (int w = 0; w < kDecodeWarps; ++w)
        if (h[k][c][w][10] >= t0) {
          const double t = (h[k][c][w][10] - t0) * 1e-3;
          lo = std::min(lo, t), hi = std::max(hi, t);
        }
      if (hi >= 0) last.push_back(hi), spread.push_back(hi - lo);
    }
    if (last.empty()) continue;
    std::sort(last.begin(), last.end()), std::sort(spread.begin(), spread.end());
    auto q = [](const std::vector<double>& v, int pct) { return v[v.size() * pct / 100 - (pct == 100 ? 1 : 0)]; };
    o << "  kernel " << k + 1 << " per CTA, its latest warp's share walked: " << q(last, 10) << " / " << q(last, 50) << " / "
      << q(last, 90) << " / " << q(last, 100) << "; its warps' spread: " << q(spread, 10) << " / " << q(spread, 50)
      << " / " << q(spread, 90) << " / " << q(spread, 100) << " (" << last.size() << " CTAs)\n";
  }
  // By warp index, for its first chunk done (phase 9) and its share walked (10): the median over CTAs of each warp's
  // lateness (its time less its CTA's earliest warp's at the same phase) -- whether the same warps are late in every CTA
  // (the schedulers' order), and whether they start late or stream slower.
  for (int k = 0; k < 2; ++k)
    for (int p : {9, 10}) {
      std::vector<double> by[kDecodeWarps];
      for (int c = 0; c < kTraceCtas; ++c) {
        double lo = 1e30;
        for (int w = 0; w < kDecodeWarps; ++w)
          if (h[k][c][w][p] >= t0) lo = std::min(lo, (h[k][c][w][p] - t0) * 1e-3);
        for (int w = 0; w < kDecodeWarps; ++w)
          if (h[k][c][w][p] >= t0) by[w].push_back((h[k][c][w][p] - t0) * 1e-3 - lo);
      }
      if (by[0].empty()) continue;
      o << "  kernel " << k + 1 << " by warp, median lateness in its CTA at " << kNames[p] << " (us):";
      for (int w = 0; w < kDecodeWarps; ++w) {
        if (by[w].empty()) continue;
        std::sort(by[w].begin(), by[w].end());
        o << " " << w << ":" << by[w][by[w].size() / 2];
      }
      o << "\n";
    }
  std::memset(h, 0, sizeof(h));
  cudaMemcpyToSymbol(g_decode_trace, h, sizeof(h));  // (the next report sees only later launches)
  return o.str();
#else
  return "";
#endif
}

bool decode_fused_runs(const DecodeLayerArgs& a, cudaStream_t s) {
  if (a.fp4_activations || a.shape.ctas_fused <= 0) return false;
  // No tokens: every CTA reads nothing and writes nothing but its arrival (the counter stays a multiple of the grid).
  DecodeLayerArgs probe = a;
  probe.tokens = 0, probe.token_count = nullptr, probe.topk = 1;  // (the plan's run fields are not set yet)
  void* params[] = {&probe};
  if (launch(kernel_fused(a.format, a.blocked_scales, a.weight_pieces), dim3(a.shape.ctas_fused), dim3(kThreads), params,
             a.shape.smem1, false, s, true) != cudaSuccess ||
      cudaStreamSynchronize(s) != cudaSuccess) {
    cudaGetLastError();  // (a launch the device refuses -- e.g. fewer SMs available than the plan saw -- is not sticky)
    return false;
  }
  return true;
}

void launch_decode_layer(const DecodeLayerArgs& a, cudaStream_t s) {
  DecodeLayerArgs args = a;
  if (a.wide) {  // (W4A4: the token quantiser,) the pre-pass, kernel 1, (the intermediate's quantiser,) kernel 2, the
                 // combine, each after the first a programmatic dependent of the one before
    if (a.fp4_activations) {
      fake_quantize(a, a.x, a.ldx, a.x_deq, a.hidden, a.tokens, a.hidden, a.a1_scale, 1, false, s);
      args.x = a.x_deq, args.ldx = a.hidden;
    }
    void* params[] = {&args};
    launch(kernel_prep(), dim3(1), dim3(kPrepThreads), params, a.experts * kPrepBytesPerExpert, a.fp4_activations, s);
    launch(kernel1w(a.format, a.blocked_scales, a.weight_pieces), dim3(a.wide_shape.ctas1), dim3(kThreads), params,
           a.wide_shape.smem1, true, s);
    if (a.fp4_activations)
      fake_quantize(a, a.inter_rows, a.inter_ld, a.inter_rows, a.inter_ld, a.tokens * a.topk, a.inter, a.a2_scale, a.topk,
                    true, s, a.weight_pieces);
    launch(kernel2w(a.format, a.blocked_scales, a.weight_pieces), dim3(a.wide_shape.ctas2), dim3(kThreads), params,
           a.wide_shape.smem2, true, s);
    const int items = a.hidden / 16 * ((a.tokens + 1) / 2), per_cta = kCombineThreads / 32;
    launch(reinterpret_cast<const void*>(decode_wide_combine), dim3(std::max(1, std::min((items + per_cta - 1) / per_cta, 1024))),
           dim3(kCombineThreads), params, 0, true, s);
    return;
  }
  if (a.fused) {  // (decode_fused_runs decided it at plan time)
    void* params[] = {&args};
    launch(kernel_fused(a.format, a.blocked_scales, a.weight_pieces), dim3(a.shape.ctas_fused), dim3(kThreads), params,
           a.shape.smem1, false, s, true);
    return;
  }
  if (a.fp4_activations) {  // the tokens as GEMM1 reads them, into x_deq
    fake_quantize(a, a.x, a.ldx, a.x_deq, a.hidden, a.tokens, a.hidden, a.a1_scale, 1, false, s);
    args.x = a.x_deq, args.ldx = a.hidden;
  }
  void* params[] = {&args};
  // W4A4: kernel 1 a programmatic dependent of the token quantiser (it waits once its rings' first copies are issued)
  launch(kernel1(a.format, a.blocked_scales, a.weight_pieces), dim3(a.shape.ctas1), dim3(kThreads), params, a.shape.smem1,
         a.fp4_activations, s);
  if (a.fp4_activations)  // the intermediate as GEMM2 reads it, in place (pair rows)
    // (pieces: each block's elements where the pieces' k order put them)
    fake_quantize(a, a.inter_rows, a.inter_ld, a.inter_rows, a.inter_ld, a.tokens * a.topk, a.inter, a.a2_scale, a.topk,
                  true, s, a.weight_pieces);
  launch(kernel2(a.format, a.blocked_scales, a.weight_pieces), dim3(a.shape.ctas2), dim3(kThreads), params, a.shape.smem2, true, s);
}

}  // namespace fp4gemm::detail
