// fp4gemm expert parallelism over peer-mapped memory (NVLink): the dispatch and combine of an
// expert-parallel MoE layer as device kernels that read and write the other ranks' buffers
// directly, with every split size on the device -- no host synchronisation, capturable in a CUDA
// graph and replayable with a new routing every step.
//
// W ranks (W <= 8, one process or one thread per GPU, or all on one GPU for tests) each own one
// *exchange buffer* of EpExchange::buffer_bytes(config) bytes, the same size on every rank, mapped
// into every rank's address space (PyTorch's SymmetricMemory, CUDA IPC, or plain device memory when
// all ranks share one device). Rank r holds experts [r * E/W, (r + 1) * E/W). A step, per rank:
//
//   1. send_counts: each token goes to every rank holding one of its experts (ids in [0, E)), once
//      per rank however many of its k experts are there; the tokens are ordered by destination,
//      then by token index (deterministic); the rank writes how many it sends into every
//      destination's buffer.                                                       -- barrier --
//   2. send_rows: each token's row is written into each destination's receive rows at the place
//      the counts give it (sources in rank order), with the token's k slots as local expert ids
//      there (-1 for the slots whose experts are elsewhere). NVFP4 / MXFP4 rows are quantised
//      here, inside the dispatch (the layer's rule, global scale EpConfig::global_scale: bit for
//      bit what the layer's own step 2 writes), and travel as packed e2m1 + linear scales; bf16
//      rows travel as they are. Rows past the count get ids -1.                    -- barrier --
//   3. the caller runs its local experts on the received rows (received(): a MoeLayer of E/W
//      experts with top-k, stopped before its combine (its weights are not read): MoeLayerArgs::expert_rows =
//      received().y, row_of = received().row_of -- each pair's expert output row is exactly the
//      full layer's row for that pair).                                            -- barrier --
//   4. combine: each rank reads its pairs' rows where their experts' ranks left them (received().y
//      of every rank, over NVLink, found through that rank's row_of) and sums them with the
//      layer's combine (FP32 fmas in slot order, one rounding): bit for bit the single-GPU layer's
//      output, for any W. The rows are read in place: nothing is copied back.
//
// The barriers are the caller's (every rank's writes of a phase visible to every rank before the
// next phase starts: e.g. SymmetricMemory's barrier(), or a device synchronisation when all ranks
// share one device). Each phase enqueues one kernel on `stream`: no allocation, no host
// synchronisation. A rank's next step may start as soon as its combine is enqueued: the next
// step's first barrier keeps every rank's local layer from overwriting y before every combine has
// read it. Receive capacity is the worst case (every token of every rank to one rank), so no
// routing can overflow it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace fp4gemm {

// What travels in the dispatch: bf16 rows (W4A16, or W4A4 layers that quantise after the
// exchange) or the layer's W4A4 activation format.
enum class EpRows { bf16, nvfp4, mxfp4 };

struct EpConfig {
  int world = 1, rank = 0;  // W (1..8) and this rank
  int experts = 0;          // E, the global expert count (ids are global), divisible by W
  int topk = 0;             // k
  int hidden = 0;           // H: a multiple of 64, at most 65536
  int max_tokens = 0;       // the most tokens one rank brings to a step
  EpRows rows = EpRows::bf16;
  float global_scale = 1.0f;  // NVFP4 rows: the layer's a1_scale (the quantiser's global scale)
  int device = -1;
};

// One step's arguments; each phase reads the fields it needs. Device pointers of config.device.
struct EpStepArgs {
  const void* hidden = nullptr;  // bf16 [tokens, H], row stride ld_hidden elements (0: H)
  std::int64_t ld_hidden = 0;
  const void* topk_ids = nullptr;  // [tokens, k] int32 (int64 with ids_int64), global ids
  bool ids_int64 = false;
  const void* topk_weights = nullptr;  // [tokens, k] float32 (bf16 with weights_bf16)
  bool weights_bf16 = false;
  int tokens = 0;                // 0..max_tokens
  void* out = nullptr;           // combine: bf16 [tokens, H], row stride ld_out (0: H)
  std::int64_t ld_out = 0;
};

// This rank's received rows (device pointers into its own exchange buffer), valid after the
// barrier that follows send_rows. Row r < count (the sum of counts[0..W-1]) is a token sent here;
// rows past it have ids -1.
struct EpReceived {
  int capacity = 0;             // rows: W * max_tokens (the local layer's T and max_tokens)
  int topk = 0;                 // k: ids per row (the local layer's top-k)
  const int* counts = nullptr;  // [W]: rows from each source rank this step
  const int* count = nullptr;   // their sum: MoeLayerArgs::token_count of the local layer's run
  const int* ids = nullptr;     // [capacity, k] local expert ids (0..E/W-1), -1 for the slots whose experts are
                                // elsewhere and past the count: the layer's top-k ids
  const void* rows = nullptr;   // bf16 rows [capacity, H] (EpRows::bf16), or
  const void* packed = nullptr;  // packed e2m1 [capacity, H/2] and linear scales [capacity, H/vec]
  const void* scales = nullptr;
  void* y = nullptr;      // bf16 [capacity * k, H]: MoeLayerArgs::expert_rows of the local layer's run
  int* row_of = nullptr;  // int32 [capacity * k]: MoeLayerArgs::row_of of that run
};

class EpExchange {
 public:
  // Bytes of each rank's exchange buffer for `config` (the same on every rank).
  static std::size_t buffer_bytes(const EpConfig& config);
  // buffers[r]: rank r's exchange buffer as mapped in this process (buffers[config.rank] is this
  // rank's own), each at least buffer_bytes(config) bytes and 256-byte aligned.
  EpExchange(const EpConfig& config, std::span<void* const> buffers);
  ~EpExchange();
  EpExchange(EpExchange&&) noexcept;
  EpExchange& operator=(EpExchange&&) noexcept;
  EpExchange(const EpExchange&) = delete;
  EpExchange& operator=(const EpExchange&) = delete;

  void send_counts(const EpStepArgs& args, cudaStream_t stream = nullptr) const;  // phase 1
  void send_rows(const EpStepArgs& args, cudaStream_t stream = nullptr) const;    // phase 2
  EpReceived received() const;                                                    // phase 3: the caller's layer
  void combine(const EpStepArgs& args, cudaStream_t stream = nullptr) const;      // phase 4
  const EpConfig& config() const;
  std::string describe() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp4gemm
