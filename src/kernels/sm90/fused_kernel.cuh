// The fused sm_90a grouped GEMM kernels: FP4 weights dequantised in registers feed wgmma (swap-AB).
// This file assembles the GEMM kernel (shared-memory carve-up, barriers, register re-allocation,
// the producer branch and the consumer dispatch) and holds the launches; its parts are in
// src/device/: prepass.cuh (kernel 1), mainloop.cuh (a consumer's work piece), epilogue.cuh,
// params.cuh (FusedParams, the producers' record), kernel_config.cuh, trace.cuh.
//
// Two launches per run:
//  1. `dequant_activations`: every group's A (tokens) -> exact f16 (NVFP4) / bf16 (MXFP4) rows in a
//     stacked workspace, K permuted per 64-block (detail::wgmma_k_source_*). A is small (tokens x K);
//     writing it once beats re-dequantising it in each of the N/128 (or N/256) CTAs that read it.
//  2. `fused_grouped_gemm`: persistent, one CTA per SM; 2 consumer warpgroups + 1 producer warpgroup.
//     Per k-block, producer warp 0 loads the tile's 128 or 256 weight rows of packed FP4 and its
//     activation rows (up to 256 x 64, 128-byte swizzle) with TMA, producer warp 1 the weight
//     scales, into a ring of stages. Each consumer warpgroup owns 64 weight rows of each 128-row
//     half: it reads their FP4 bytes from shared memory, dequantises them straight into wgmma
//     A-operand registers and issues one m64nNk16 per half and k-step with the activations as B
//     (N = tile tokens rounded up to 16, so small groups are not padded to 128). Tiles of <= 128
//     tokens have two halves when the plan has enough of them (device/schedule.hpp: tile_rows).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cudaTypedefs.h>

#pragma once

#include <cstring>
#include <type_traits>

#include "device/kernel_config.cuh"
#include "device/mainloop.cuh"
#include "device/scheduler.cuh"
#include "device/params.cuh"
#include "device/prepass.cuh"
#include "device/ptx/ptx.cuh"
#include "device/scale_source.cuh"
#include "device/trace.cuh"
#include "formats/scale_layout.hpp"
#include "kernels/launch_config.hpp"
#include "kernels/sm90/fused_launch.hpp"
#include "kernels/sm90/fused_variants.cuh"
#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail::sm90 {

// The weights of k-block kb, rows [row0, row0 + box) of a tile, into the stage. GLU plans (MoE
// and dual GEMMs) read them through 4-D maps whose 16-row blocks pair 8 gate rows with their 8 up rows
// (params.cuh, MoeScheduleParams::glu).
template <class Scheduler>
__device__ __forceinline__ void load_weights(const FusedParams& p, std::uint8_t* dst, const CUtensorMap* map,
                                             std::uint64_t* bar, int kb, int row0) {
  // (A GLU kernel runs GLU plans only (launch_gemm), so the run-time test below is always true there.
  // It stays because without it ptxas allocates the MoE GLU kernels' consumers differently: ring
  // addresses reloaded from the stack in every k-loop, 190-192 LDL sites, stack 64 B instead of 24.)
  // Weights in k-block pieces (WeightLayout::pieces): [16-row blocks][k-blocks][512-byte pieces], a GLU's blocks
  // already 8 gate rows and their 8 up rows. (The GLU kernel's run-time test as below, for the same reason.)
  if constexpr (Scheduler::kWeightPieces && Scheduler::kGlu) {
    if (p.moe.glu != 0) {
      ptx::tma_load_3d(dst, map, bar, 0, kb, row0 / 16);
      return;
    }
  }
  if constexpr (Scheduler::kGlu) {
    if (p.moe.glu != 0) {
      ptx::tma_load_4d(dst, map, bar, kb * (KernelConfig::kBlockK / 2), 0, 0, row0 / 16);
      return;
    }
  }
  if constexpr (Scheduler::kWeightPieces && !Scheduler::kGlu) {
    ptx::tma_load_3d(dst, map, bar, 0, kb, row0 / 16);
    return;
  }
  ptx::tma_load_2d(dst, map, bar, kb * (KernelConfig::kBlockK / 2), row0);
}

// Scheduler: how the CTA finds its pieces (device/scheduler.cuh): HostWorkList (the pointer-array
// plan's list) or MoeDeviceSchedule (the MoE plan's CTAs cut the run's routing themselves). One
// instantiation each, so that the MoE schedule's prologue cannot change the pointer-array
// kernel's register allocation (sharing one kernel made ptxas spill in the MXFP4 mainloops).
// kSmallMx: how MXFP4 scales are decoded (kMxTwo, kMxOne, kMxOneChecked: params.cuh; MoE plans
// whose scale codes are all <= 128 take one multiply per weight pair instead of two, mainloop.cuh).
template <Format F, class Scheduler, int kSmallMx = kMxTwo>
__global__ void __launch_bounds__(KernelConfig::kThreads, 1)
    fused_grouped_gemm(const __grid_constant__ FusedParams p, OutType out_type) {
  using C = KernelConfig;
  if (p.trigger_dependents != 0) ptx::launch_dependents();  // (params.cuh: the expert layer's GEMMs)
  extern __shared__ __align__(1024) std::uint8_t smem_raw[];
  // The 128-byte swizzle needs 1024-byte aligned stages; the launch reserves 1 KB of slack.
  std::uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  // The producers' first record is loaded beside the CTA's range (both depend on blockIdx only),
  // not behind it, so the ring's first loads wait on one metadata load.
  // (Only the fields the early loads need are kept: the record's 16 registers live across the
  // CTA's set-up made ptxas spill the CTA range in the consumers' path.)
  const bool producer = threadIdx.x >= C::kConsumerThreads;
  const CUtensorMap* first_wmap = nullptr;
  int first_kb0 = 0, first_kbs = 0, first_row0 = 0, first_loaded = 0;
  Trace::Cta trace;  // (TraceOff: nothing)
  // (The MoE schedule works in the ring's memory: nothing is loaded into it yet.)
  const CtaWork work = Scheduler::initial_work(p, smem);
  const int begin = work.begin, n16 = work.n16;
  trace.work_known(/*moe_schedule=*/Scheduler::kRoutedOutput);
  if (threadIdx.x == C::kConsumerThreads) {  // (a CTA without work never uses it)
    const ProducerPiece& r = p.first_pieces[blockIdx.x];
    first_wmap = r.wmap, first_kb0 = r.kb_begin, first_kbs = r.kb_end - r.kb_begin, first_row0 = r.row0,
    first_loaded = r.loaded;
  }
  if (work.empty()) {
    trace.no_work();
    return;
  }
  // Every piece of this CTA has one token-width class (device/schedule.hpp), so the ring's
  // activation stages are sized to it: narrow tiles get a deeper ring to cover load latency.
  const int act_stage_bytes = n16 * C::kActClassBytes;
  const CUtensorMap* act_map = p.act_maps + (n16 - 1);
  // (halves from the plan's constant, not a register: ptxas rematerialises the ring's addresses
  // from it; a halves computed in the prologue made it spill them, 136-172 bytes in every mainloop)
  const int halves = halves_of_class(n16, p.narrow_rows);
  // The carve-up: SmemLayout::of (kernel_config.cuh), by which the plan sizes the allocation, written
  // as a chain of pointer steps (each part from the one before). (Through a struct of pointers or of
  // offsets ptxas allocated the kernel differently: 30-700 more or fewer instructions per kernel.)
  // The MoE kernel's classes with one commit group per k-block fill their rings in stage pairs (below).
  const int ring_kbps = Scheduler::kRoutedOutput ? moe_stage_kblocks(n16, halves) : 1;
  const int stages = SmemLayout::stages(p.ring_bytes, act_stage_bytes, halves, ring_kbps);
  std::uint8_t* act_smem = smem;                                                // [stages][act_stage_bytes]
  std::uint8_t* w_smem = smem + stages * act_stage_bytes;                       // [stages][halves][4 KB]
  std::uint8_t* s_smem = w_smem + stages * halves * C::kHalfWeightBytes;       // [stages][halves][512 B]
  // [2][128 tokens][128 B] after the ring, 1024-byte aligned (TMA's 128-byte swizzle atoms)
  const int ring_used = static_cast<int>(s_smem + stages * halves * C::kScaleAtomBytes - smem);
  std::uint8_t* epi_smem = smem + (ring_used + 1023) / 1024 * 1024;
  auto* full = reinterpret_cast<std::uint64_t*>(epi_smem + C::kEpiBytes);
  std::uint64_t* empty = full + stages;
  // The MoE kernel's classes with one commit group per k-block (and the 16-token class, which
  // consumes a pair as one group) stream two k-blocks per weight load (kernel_config.cuh,
  // kMoeWideStageKblocks): ring stages 2i and 2i + 1 hold one pair, their weights as one box of
  // 64-byte rows over both stages' weight space, their scale atoms as [half][2] over both stages'
  // scale space. A pair has one `full` and one `empty` barrier, stage 2i's (stage 2i + 1's are
  // initialised and unused): one wait and one arrive per pair on each side instead of two.
  // Activation boxes and the ring's geometry stay per k-block; such a ring has an even stage count
  // (SmemLayout::stages), >= 4 (the plan checks).
  // (The producer's piece loop takes the width as a compile-time constant, below: as a run-time
  // value it made ptxas spill, with spill loads in every other class's consumer loop.)
  auto stage_kblocks = [&] { return ring_kbps; };
  static_assert(kMoeWideStageKblocks == 2, "the producer's pair arithmetic (stage + 1, atoms) is written for two");

  trace.start();
  // The main producer thread initialises the barriers and issues the weights of the ring's first
  // fill before the CTA's barrier: they depend on nothing the other threads do.
  int pre_issued = 0;  // k-blocks whose weights are already in flight (producer warp 0, lane 0)
  // The MoE kernel splits the loads over three producer warps (weights, scales, activations; each
  // one arrival on `full`) and its scales are always blocked (the plan converts linear ones), so
  // its scale warp has no cp.async arrivals. The pointer-array kernels keep two warps: weights and
  // activations in warp 0, scales (and the 32 cp.async arrivals of linear ones) in warp 1.
  constexpr bool kActWarp = Scheduler::kRoutedOutput;
  if (threadIdx.x == C::kConsumerThreads) {
    for (int s = 0; s < stages; ++s) {
      // full: producer warp 0's lane 0 (expect_tx or plain), producer warp 1's lane 0 (expect_tx or
      // plain) and either warp 1's 32 cp.async arrivals or (kActWarp) warp 2's lane 0 (expect_tx)
      ptx::mbarrier_init(&full[s], kActWarp ? 3 : 1 + 1 + 32);
      ptx::mbarrier_init(&empty[s], C::kConsumerThreads);  // one arrive per consumer thread
    }
    ptx::fence_barrier_init();
    trace.setup_done();
    ptx::prefetch_tensormap(act_map);
    // Weights of the first piece only (later pieces' records come through the chain).
    // (two-k-block stages: whole pairs, the last one possibly past the piece's end)
    const int early = min(min(stages, p.early_kblocks), first_kbs);
    const int kbps = stage_kblocks();
    const CUtensorMap* early_map = kbps > 1 ? first_wmap + kMoeWideStageMaps : first_wmap;
    for (int kb = first_kb0; pre_issued < early; kb += kbps) {
      ptx::mbarrier_expect_tx(&full[pre_issued], first_loaded * C::kHalfWeightBytes * kbps);
      load_weights<Scheduler>(p, w_smem + pre_issued * halves * C::kHalfWeightBytes, early_map, &full[pre_issued], kb,
                              first_row0);
      pre_issued += kbps;
    }
    trace.early_issued();
  }
  __syncthreads();

  if (producer) {
    // ---------------- producers (warpgroup 2: warp 0 loads weights and activations, warp 1 the
    // weight scales, the other two idle; in the MoE kernel warp 2 loads the activations) ----------------
    // (One warp issuing everything measured 1-2 % slower than this split. A producer thread's
    // issue of a k-block takes ~500 cycles, as long as the decode consumers' use of it, and every
    // cycle added to it adds to the decode loop's k-block: measured in a fed micro-benchmark of
    // the decode loop, bench/micro/decode_loop.cu.)
    ptx::setmaxnreg_dec<C::kProducerRegs>();
    trace.producer_branch(/*recorder=*/threadIdx.x == C::kConsumerThreads);
    const int pwarp = threadIdx.x / 32 - C::kConsumerThreads / 32;
    // (The MoE kernel's third warp issues the activations and alone waits for the pre-pass, so the
    // weights run a whole ring ahead of it; with the scale warp's lighter MoE path: -2 % on the
    // Mixtral T 256, Qwen3 T 1 and DeepSeek-V3 T 32 layers, H200.)
    constexpr int kProducerWarps = kActWarp ? 3 : 2;
    if (pwarp < kProducerWarps) {
      const int lane = threadIdx.x % 32;
      const bool loads_main = pwarp == 0, loads_scales = pwarp == 1;
      const bool loads_acts = kActWarp ? pwarp == 2 : loads_main;  // (the warp that waits for the pre-pass)
      // Launched as a programmatic dependent of the activation pre-pass, this CTA may start
      // while the pre-pass still runs. Only the activations come from it: the weights, their
      // scales (the user's, or the scale conversion's, which finished before the pre-pass began)
      // and the schedule can be read now. So warp 0 issues the weights of the ring's first fill
      // before it waits (expect_tx without arriving: a stage cannot complete before its
      // activation load is added below), and the scale warp never waits. (In the MoE kernel only
      // the activation warp waits: the weights run ahead of the pre-pass for the whole ring.)
      constexpr int kVec = F == Format::nvfp4 ? 16 : 32;
      auto piece_info = [&](int pi) {  // pieces after the first: through the chain
        const WorkPiece piece = p.pieces[pi];
        const TileDesc tile = p.tiles[piece.tile];
        const GroupParams& g = p.groups[tile.group];
        return make_producer_piece(piece, tile, g.n, g.k / kVec, halves,
                                   p.weight_maps + (Scheduler::kRoutedOutput ? kMoeMapsPerExpert : 2) * tile.group,
                                   p.scale_blocked[tile.group], p.scale_linear[tile.group]);
      };
      ProducerPiece pp = p.first_pieces[blockIdx.x];  // the first piece's whole record (an L1 hit
                                                      // for warp 0), then the chain
      if (loads_acts && lane == 0) {
        ptx::wait_prerequisites();
        trace.producer_past_wait();
      }
      int issued = 0;  // stages issued so far (the first pre_issued have their weights in flight)
      int stage = 0;
      std::uint32_t phase = 0;
      const Trace::Row counters = trace.row(kTraceProducerRole, /*recorder=*/pwarp == 0 && lane == 0);
      const Trace::Stamp t_loop = counters.now();
      // The piece loop, one instantiation per stage width (k-blocks per weight load): a run-time
      // width made ptxas spill in the producer and load spilled values in every consumer loop
      // (stack 32 -> 128 B).
      auto produce = [&](auto kbps_constant) {
      constexpr int kbps = decltype(kbps_constant)::value;
      for (int pi = begin; work.is_valid(pi); pi = work.next_work(pi)) {
        if (pi > begin) pp = piece_info(pi);
        const int rows = pp.rows;
        const int loaded = pp.loaded;
        const CUtensorMap* wmap = kbps > 1 ? pp.wmap + kMoeWideStageMaps : pp.wmap;
        // (bytes, lane_src, row32: the pointer-array kernels' paths only; unused in the MoE kernel's)
        [[maybe_unused]] const std::uint32_t bytes = loaded * C::kHalfWeightBytes + act_stage_bytes;  // class N >= tile tokens
        const std::uint8_t* sblk = pp.sblk;
        const std::uint8_t* slin = pp.slin;
        constexpr int kColsPerKb = F == Format::nvfp4 ? 4 : 2;
        const int cols = pp.cols;
        const int col_blocks = (cols + 3) / 4;
        // Linear scales, gathered into the blocked atoms: row r's 4 columns go to byte
        // (r % 32) * 16 + (r / 32) * 4 of its half's atom, so lane l fills bytes 16l..16l+15
        // (rows l + 32q) of each. Rows past N are zero-filled (their weights are TMA's zero fill).
        [[maybe_unused]] const std::uint8_t* lane_src = slin + static_cast<std::int64_t>(pp.row0 + lane) * cols;
        [[maybe_unused]] const std::int64_t row32 = static_cast<std::int64_t>(32) * cols;
        // Bit 4h + q: row row0 + 128h + 32q + lane exists.
        unsigned valid_rows = 0;
#pragma unroll
        for (int i = 0; i < 4 * C::kMaxHalves; ++i) valid_rows |= (pp.row0 + 32 * i + lane < rows ? 1u : 0u) << i;
        for (int kb = pp.kb_begin; kb < pp.kb_end; kb += kbps) {  // stages [stage, stage + kbps)
          const Trace::Stamp t0 = counters.now();
          ptx::mbarrier_wait(&empty[stage], phase ^ 1);  // (a pair: its one barrier)
          const Trace::Stamp t1 = counters.now();
          counters.add_between(kTraceBarrier, t0, t1);
          counters.add(kTraceKblocks, min(kbps, pp.kb_end - kb));  // (a stage pair: 2)
          if constexpr (kActWarp) {
            if (loads_main && lane == 0) {
              if (issued < pre_issued) {
                ptx::mbarrier_arrive(&full[stage]);  // (its weights' bytes were expected at the set-up)
              } else {
                // (a pair's box past the piece's end or past K: rows the consumers do not read, or
                // TMA's zero fill; its bytes count either way)
                ptx::mbarrier_arrive_expect_tx(&full[stage], loaded * C::kHalfWeightBytes * kbps);
                load_weights<Scheduler>(p, w_smem + stage * halves * C::kHalfWeightBytes, wmap, &full[stage], kb, pp.row0);
              }
            }
            if (loads_acts && lane == 0) {
              ptx::mbarrier_arrive_expect_tx(&full[stage], static_cast<std::uint32_t>(kbps * act_stage_bytes));
              for (int j = 0; j < kbps; ++j) {
                // (a pair's second box past the piece's end reloads its first: the consumers skip it)
                const int kbj = kb + j < pp.kb_end ? kb + j : kb;
                ptx::tma_load_2d(act_smem + (stage + j) * act_stage_bytes, act_map, &full[stage], kbj * C::kBlockK,
                                 pp.act_row0);
              }
            }
          } else if (loads_main && lane == 0) {
            const bool weights_issued = issued < pre_issued;
            ptx::mbarrier_arrive_expect_tx(&full[stage], weights_issued ? static_cast<std::uint32_t>(act_stage_bytes) : bytes);
            if (!weights_issued)
              load_weights<Scheduler>(p, w_smem + stage * halves * C::kHalfWeightBytes, wmap, &full[stage], kb, pp.row0);
            ptx::tma_load_2d(act_smem + stage * act_stage_bytes, act_map, &full[stage], kb * C::kBlockK,
                             pp.act_row0);
          }
          counters.add_since(kTraceIssue, t1);
          if (loads_scales) {
            const ScaleStage ss{s_smem + stage * halves * C::kScaleAtomBytes, &full[stage], kb, pp.kb_end, halves, loaded,
                                lane};
            if (kActWarp || slin == nullptr) {  // (MoE plans: always blocked)
              BlockedBulk::issue<kbps, kColsPerKb>(ss, sblk, pp.row0, col_blocks);
            } else if constexpr (Scheduler::kGlu && !Scheduler::kRoutedOutput) {
              PairedDual::issue<kColsPerKb>(ss, slin, sblk, pp.row0, rows, cols, p.layout);
            } else {
              LinearGather::issue<kColsPerKb>(ss, lane_src, row32, valid_rows, slin);
            }
            if constexpr (!kActWarp) ptx::cp_async_mbarrier_arrive_noinc(&full[stage]);
          }
          issued += kbps;
          stage += kbps;
          if (stage == stages) { stage = 0; phase ^= 1; }
        }
      }
      };
      if (stage_kblocks() > 1)
        produce(std::integral_constant<int, kMoeWideStageKblocks>{});
      else
        produce(std::integral_constant<int, 1>{});
      counters.add_since(kTraceMainloop, t_loop);
      trace.finish(counters, kTraceProducerRole);
    }
    return;
  }

  // ---------------- consumers ----------------
  ptx::setmaxnreg_inc<C::kConsumerRegs>();
  trace.consumer_branch(/*recorder=*/threadIdx.x == 0);
  ConsumerState st;
  st.cw = threadIdx.x / 128;
  st.s_smem = s_smem;
  st.stages = stages;
  st.act_stage_bytes = act_stage_bytes;
  st.ctid = threadIdx.x;
  st.trace = trace.row(st.cw, /*recorder=*/threadIdx.x % 128 == 0);
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  st.lane = lane;
  st.t = lane % 4;
  st.row_in_tile = st.cw * 64 + warp * 16 + lane / 4;
  // One mainloop per token-width class (wgmma's N is part of the instruction) and tile height,
  // in steps of 16 tokens: 24 instantiations keep compile time sane and waste at most 15 token
  // columns per tile.
  // The host gives every CTA pieces of a single class (device/schedule.hpp; checked by the host
  // tier's schedule tests -- a check here costs the same serialisation), and the piece loop
  // sits inside each instantiation: with the loop outside the dispatch, ptxas serialises every
  // wgmma of the kernel (C7512, "insufficient register resources").
  // Key: the class for tiles of their natural height (1-8: two halves, 9-16: one), 17-24: the
  // narrow classes at one half (small problems, Schedule::narrow_rows = 128).
  switch (n16 + (halves == 1 && n16 <= 8 ? 16 : 0)) {
#define FP4GEMM_CASE(key, n16, h)                                                                 \
  case key:                                                                                       \
    for (int pi = begin; work.is_valid(pi); pi = work.next_work(pi)) {                            \
      const WorkPiece piece = p.pieces[pi];                                                       \
      const TileDesc tile = p.tiles[piece.tile];                                                  \
      consume_piece<F, 2 * n16, h, Scheduler::kRoutedOutput, Scheduler::kGlu, kSmallMx, Scheduler::kWeightPieces>(p, st, piece, tile, act_smem, w_smem, full, empty, epi_smem, out_type); \
    }                                                                                             \
    break;
    FP4GEMM_CASE(1, 1, 2) FP4GEMM_CASE(2, 2, 2) FP4GEMM_CASE(3, 3, 2) FP4GEMM_CASE(4, 4, 2)
    FP4GEMM_CASE(5, 5, 2) FP4GEMM_CASE(6, 6, 2) FP4GEMM_CASE(7, 7, 2) FP4GEMM_CASE(8, 8, 2)
    FP4GEMM_CASE(9, 9, 1) FP4GEMM_CASE(10, 10, 1) FP4GEMM_CASE(11, 11, 1) FP4GEMM_CASE(12, 12, 1)
    FP4GEMM_CASE(13, 13, 1) FP4GEMM_CASE(14, 14, 1) FP4GEMM_CASE(15, 15, 1) FP4GEMM_CASE(16, 16, 1)
    FP4GEMM_CASE(17, 1, 1) FP4GEMM_CASE(18, 2, 1) FP4GEMM_CASE(19, 3, 1) FP4GEMM_CASE(20, 4, 1)
    FP4GEMM_CASE(21, 5, 1) FP4GEMM_CASE(22, 6, 1) FP4GEMM_CASE(23, 7, 1) FP4GEMM_CASE(24, 8, 1)
#undef FP4GEMM_CASE
    default: break;
  }
  // The last TMA stores must have read the epilogue buffer before the CTA's shared memory goes
  // (their global writes complete with the grid, as in CUTLASS's TMA-store epilogue).
  if (p.c_maps != nullptr && threadIdx.x % 128 == 0) ptx::bulk_wait_group_read_0();
  trace.finish(st.trace, st.cw);
}

// The persistent GEMM, launched as a programmatic dependent of the pre-pass before it: its CTAs
// start (barrier set-up, tensor-map prefetch) as the pre-pass drains; the producer waits for the
// pre-pass with griddepcontrol.wait.
template <Format F>
cudaError_t launch_gemm(const FusedParams& params, OutType out_type, int num_ctas, std::size_t smem_bytes,
                        cudaStream_t stream) {
  const LaunchConfig launch(dim3(num_ctas), dim3(KernelConfig::kThreads), smem_bytes, stream);  // (of the pre-pass)
  const cudaLaunchConfig_t& config = launch.config;
  // The row of the table (fused_variants.cuh; each row compiled in its own unit) this plan runs: format, scheduler (host work list or the
  // MoE device schedule), GLU epilogue or not, and for MXFP4 MoE plans the scale decode.
  const bool moe = params.moe.experts > 0, glu = params.moe.glu != 0, pieces = moe && params.moe.weight_pieces != 0;
#define FP4GEMM_LAUNCH(name) return fused_launch_##name(config, params, out_type)
#define FP4GEMM_LAUNCH_MOE(name)                             \
  do {                                                       \
    if (pieces) {                                            \
      if (glu) FP4GEMM_LAUNCH(name##_glu_pieces);            \
      FP4GEMM_LAUNCH(name##_pieces);                         \
    }                                                        \
    if (glu) FP4GEMM_LAUNCH(name##_glu);                     \
    FP4GEMM_LAUNCH(name);                                    \
  } while (0)
  if constexpr (F == Format::mxfp4) {
    if (!moe) return glu ? fused_launch_mxfp4_host_glu(config, params, out_type) : fused_launch_mxfp4_host(config, params, out_type);
    switch (params.small_mx_scales) {
      case kMxOne: FP4GEMM_LAUNCH_MOE(mxfp4_moe_one);
      case kMxOneChecked: FP4GEMM_LAUNCH_MOE(mxfp4_moe_checked);
      default: FP4GEMM_LAUNCH_MOE(mxfp4_moe);
    }
  } else {
    if (!moe) return glu ? fused_launch_nvfp4_host_glu(config, params, out_type) : fused_launch_nvfp4_host(config, params, out_type);
    FP4GEMM_LAUNCH_MOE(nvfp4_moe);
  }
#undef FP4GEMM_LAUNCH_MOE
#undef FP4GEMM_LAUNCH
}

// Enqueues the pre-pass and the fused kernel. Instantiated once per format in fused_<format>.cu
// (extern below), so the two instantiations compile in parallel.
// Every launch's error is returned at once (a later launch would otherwise run on a failed one's
// missing output).
template <Format F>
cudaError_t launch_fused(const FusedParams& params, OutType out_type, int num_ctas,
                  std::size_t smem_bytes, const PrepassArgs& prepass, dim3 pre_grid,
                  const ScaleConversion* conversions, int num_conversions, dim3 conversion_grid,
                  cudaStream_t stream) {
  if (num_conversions > 0) {
    scales_to_blocked<F><<<conversion_grid, 256, 0, stream>>>(conversions, num_conversions);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  Trace::reset_prepass(stream);  // (a trace build's pre-pass stamps)
  dequant_activations<F><<<pre_grid, 256, 0, stream>>>(prepass);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return launch_gemm<F>(params, out_type, num_ctas, smem_bytes, stream);
}

// The routed (MoE) path: the pre-pass reads the routed rows, then the same GEMM runs with the
// MoeDeviceSchedule scheduler (its CTAs cut the run's routing into their work list in their
// prologue, device/moe_schedule.cuh).
template <Format F, PrepassSource S>
cudaError_t launch_routed(const FusedParams& params, OutType out_type, int num_ctas, std::size_t smem_bytes,
                          const PrepassArgs& prepass, dim3 pre_grid, cudaStream_t stream) {
  static_assert(S != PrepassSource::routed_bf16 || F == Format::mxfp4, "bf16 activations pair with bf16 weights");
  Trace::reset_prepass(stream);  // (a trace build's pre-pass stamps)
  // A programmatic dependent of the launch before it (the layer's routing, or the caller's kernel): it waits for that
  // grid before reading anything and only then lets the GEMM launch (device/prepass.cuh).
  const LaunchConfig pre(pre_grid, dim3(256), 0, stream);
  if (const cudaError_t e = cudaLaunchKernelEx(&pre.config, dequant_activations<F, S>, prepass); e != cudaSuccess)
    return e;
  return launch_gemm<F>(params, out_type, num_ctas, smem_bytes, stream);
}

template <Format F>
cudaError_t launch_routed_prepared(const FusedParams& params, OutType out_type, int num_ctas, std::size_t smem_bytes,
                                   cudaStream_t stream) {
  return launch_gemm<F>(params, out_type, num_ctas, smem_bytes, stream);
}

// Every instantiation of format F that launch_gemm can launch (the table's rows of F).
template <Format F>
cudaError_t set_fused_smem(std::size_t smem_bytes) {
  cudaError_t e = cudaSuccess;
#define FP4GEMM_SET_SMEM(name, format, scheduler, mx) \
  if (e == cudaSuccess && format == F) e = fused_smem_##name(smem_bytes);
  FP4GEMM_FUSED_VARIANTS(FP4GEMM_SET_SMEM)
#undef FP4GEMM_SET_SMEM
  return e;
}

// Copies the last launch's counters out: the launched variant's unit's counters, then the
// pre-pass's stamps from this unit (cudaErrorNotSupported unless a trace build).
template <Format F>
cudaError_t read_trace(unsigned long long* out) {
  if (!Trace::kOn || g_fused_last_trace == nullptr) return cudaErrorNotSupported;
  if (const cudaError_t e = g_fused_last_trace(out); e != cudaSuccess) return e;
  return Trace::read_prepass(out + static_cast<std::size_t>(kTraceCtas) * kTraceRoles * kTraceCounters);
}

#define FP4GEMM_FUSED_INSTANTIATION(PREFIX, F)                                                            \
  PREFIX template cudaError_t launch_fused<F>(const FusedParams&, OutType, int, std::size_t, \
                                       const PrepassArgs&, dim3, const ScaleConversion*, int, dim3, \
                                       cudaStream_t);                                                     \
  PREFIX template cudaError_t set_fused_smem<F>(std::size_t);                                           \
  PREFIX template cudaError_t read_trace<F>(unsigned long long*);                                       \
  PREFIX template cudaError_t launch_routed<F, PrepassSource::routed_fp4>(const FusedParams&, OutType, int,        \
                                                                      std::size_t, const PrepassArgs&, dim3, \
                                                                      cudaStream_t);

#define FP4GEMM_W4A16_INSTANTIATION(PREFIX)                                                              \
  PREFIX template cudaError_t launch_routed<Format::mxfp4, PrepassSource::routed_bf16>(                     \
      const FusedParams&, OutType, int, std::size_t, const PrepassArgs&, dim3, cudaStream_t);                 \
  PREFIX template cudaError_t launch_routed_prepared<Format::mxfp4>(const FusedParams&, OutType, int, std::size_t, \
                                                                   cudaStream_t);

#ifndef FP4GEMM_FUSED_INSTANTIATE
FP4GEMM_FUSED_INSTANTIATION(extern, Format::nvfp4)
FP4GEMM_FUSED_INSTANTIATION(extern, Format::mxfp4)
FP4GEMM_W4A16_INSTANTIATION(extern)
#endif

}  // namespace fp4gemm::detail::sm90
