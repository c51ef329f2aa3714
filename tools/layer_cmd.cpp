// `fp4gemm layer`: time the whole MoE expert layer (fp4gemm::MoeLayer) on a random top-k routing,
// with realistic data (random nibbles, scales in the normal range) and the memory floor of the
// active experts' weights. `fp4gemm quantize`: the GPU activation quantiser against a device copy
// of the same bytes.
#include <algorithm>
#include <iostream>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "cli.hpp"
#include "data.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe_layer.hpp"
#include "fp4gemm/quantize.hpp"
#include "report.hpp"
#include "timing.hpp"

namespace fp4gemm::cli {

int run_layer(const LayerCommandOptions& o) {
  if (o.experts < 1 || o.experts > 512) throw Error("--experts", -1, "must be in 1..512");
  if (o.topk < 1 || o.topk > o.experts) throw Error("--topk", -1, "must be in 1..--experts");
  if (o.tokens < 1) throw Error("--tokens", -1, "must be >= 1");
  if (o.hidden < 32 || o.hidden % 32) throw Error("--hidden", -1, "must be a positive multiple of 32");
  if (o.inter < 32 || o.inter % 32) throw Error("--inter", -1, "must be a positive multiple of 32");
  require_writable(o.json);
  const DeviceInfo device = require_device();
  const bool w16 = o.act == "bf16";
  const Format format = w16 ? Format::mxfp4 : parse_format(o.act);
  const int E = o.experts, H = o.hidden, I = o.inter, T = o.tokens, k = o.topk, vec = scale_block_size(format);
  const bool oai = o.activation == "swigluoai";
  Stream stream;
  const cudaStream_t s = stream.get();

  const std::size_t w13_bytes = std::size_t{1} * E * 2 * I * H / 2, w2_bytes = std::size_t{1} * E * H * I / 2;
  const std::size_t s13_bytes = E * formats::blocked_scale_bytes(2 * I, H / vec);
  const std::size_t s2_bytes = E * formats::blocked_scale_bytes(H, I / vec);
  require_free_memory(w13_bytes + w2_bytes + s13_bytes + s2_bytes + std::size_t{4} * T * H, "the layer's weights");
  progress("[layer] generating weights (" + std::to_string((w13_bytes + w2_bytes) >> 20) + " MiB)...");
  DeviceBuffer w13(w13_bytes, "w13"), s13(s13_bytes, "w13 scales"), w2(w2_bytes, "w2"), s2(s2_bytes, "w2 scales");
  fill_bytes_random(w13.get(), w13.padded_bytes(), o.seed, s);
  fill_bytes_random(w2.get(), w2.padded_bytes(), o.seed + 1, s);
  // Scales near 1/8..1 (a checkpoint's range for unit-scale activations): the layer's values stay
  // finite and tensor-core power realistic.
  fill_scales_gpu_mode(s13.get(), s13.padded_bytes(), format, o.seed + 2, s);
  fill_scales_gpu_mode(s2.get(), s2.padded_bytes(), format, o.seed + 3, s);
  DeviceBuffer hidden(std::size_t{2} * T * H, "hidden"), out(std::size_t{2} * T * H, "out");
  fill_bf16_random(hidden.get(), std::size_t{1} * T * H, o.seed + 4, s);

  std::mt19937_64 rng(o.seed);
  std::vector<int> ids(static_cast<std::size_t>(T) * k), pool(E);
  std::vector<float> weights(ids.size());
  std::iota(pool.begin(), pool.end(), 0);
  std::set<int> active;
  std::uniform_real_distribution<float> wd(0.0f, 1.0f);
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < k; ++j) std::swap(pool[j], pool[j + rng() % (E - j)]);  // k distinct experts
    for (int j = 0; j < k; ++j) ids[t * k + j] = pool[j], weights[t * k + j] = wd(rng), active.insert(pool[j]);
  }
  DeviceBuffer d_ids(4 * ids.size(), "topk_ids"), d_w(4 * weights.size(), "topk_weights");
  CLI_CUDA_CHECK(cudaMemcpy(d_ids.get(), ids.data(), 4 * ids.size(), cudaMemcpyHostToDevice), "layer");
  CLI_CUDA_CHECK(cudaMemcpy(d_w.get(), weights.data(), 4 * weights.size(), cudaMemcpyHostToDevice), "layer");

  MoeLayerWeights lw;
  lw.experts = E, lw.hidden = H, lw.inter = I;
  lw.w13 = w13.get(), lw.w13_scales = s13.get(), lw.w2 = w2.get(), lw.w2_scales = s2.get();
  MoeLayerOptions lo;
  lo.format = format, lo.activations = w16 ? MoeActivation::bf16 : MoeActivation::fp4;
  lo.activation = oai ? MoeEpilogue::swigluoai : MoeEpilogue::silu;
  lo.gate_up = oai ? GateUpLayout::interleaved : GateUpLayout::stacked;
  lo.max_tokens = T, lo.topk = k;
  if (format == Format::nvfp4 && !w16) lo.a1_scale = lo.a2_scale = 1.0f / 64;
  const MoeLayer layer(lw, lo);
  MoeLayerArgs args;
  args.hidden = hidden.get(), args.topk_ids = d_ids.get(), args.topk_weights = d_w.get();
  args.tokens = T, args.out = out.get();
  std::cout << "fp4gemm layer: E " << E << ", H " << H << ", I " << I << ", T " << T << ", top-" << k << ", "
            << o.act << (w16 ? " (W4A16)" : " (W4A4)") << ", " << o.activation << "; " << active.size()
            << " experts active\n"
            << layer.describe() << "\n";
  layer.run(args, s);
  layer.check(s);

  TimingConfig timing;
  timing.iters = o.iters, timing.warmup = o.warmup;
  const L2Flusher flusher(device.l2_bytes);
  const TimingStats t = time_region(s, &flusher, timing, [&](cudaStream_t st) { layer.run(args, st); });
  // Bytes at least moved: the active experts' weights and scales, the tokens in and out.
  const double n_active = static_cast<double>(active.size());
  const double bytes = n_active / E * static_cast<double>(w13_bytes + w2_bytes + s13_bytes + s2_bytes) + 4.0 * T * H;
  const double flops = 2.0 * T * k * (2.0 * I * H + static_cast<double>(H) * I);
  std::cout << time_line(t, flops, bytes) << "\n";
  if (!o.json.empty()) {
    Json doc;
    doc["tool"] = "fp4gemm layer";
    doc["version"] = FP4GEMM_VERSION;
    doc["date"] = utc_now();
    doc["gpu"] = device_json(device);
    doc["shape"] = Json{{"experts", E}, {"hidden", H}, {"inter", I}, {"tokens", T}, {"topk", k}};
    doc["settings"] = Json{{"act", o.act}, {"activation", o.activation}, {"seed", o.seed}, {"iters", o.iters}};
    doc["active_experts"] = active.size();
    doc["plan"] = layer.describe();
    doc["flops"] = flops;
    doc["bytes"] = bytes;
    doc["time_us"] = stats_json(t);
    write_json(o.json, doc);
  }
  return 0;
}

int run_quantize(const QuantizeCommandOptions& o) {
  const Format format = parse_format(o.format);
  const int vec = scale_block_size(format);
  if (o.rows < 1) throw Error("--rows", -1, "must be >= 1");
  if (o.k < vec || o.k % vec) throw Error("--k", -1, "must be a positive multiple of " + std::to_string(vec));
  require_writable(o.json);
  const DeviceInfo device = require_device();
  const ScaleLayout layout = parse_layout(o.scales);
  Stream stream;
  const cudaStream_t s = stream.get();
  const std::size_t in_bytes = 2 * o.rows * o.k, packed = o.rows * o.k / 2;
  const std::size_t sbytes = formats::scale_bytes(layout, o.rows, o.k / vec);
  DeviceBuffer x(in_bytes, "x"), q(packed, "packed"), sc(sbytes, "scales"), copy(in_bytes, "copy");
  fill_bf16_random(x.get(), o.rows * o.k, 7, s);
  QuantizeArgs a;
  a.format = format, a.x = x.get(), a.rows = o.rows, a.k = o.k, a.packed = q.get(), a.scales = sc.get();
  a.scale_layout = layout;
  if (format == Format::nvfp4) a.global_scale = 1.0f / 448;
  TimingConfig timing;
  timing.iters = o.iters, timing.warmup = o.warmup;
  const L2Flusher flusher(device.l2_bytes);
  const TimingStats tq = time_region(s, &flusher, timing, [&](cudaStream_t st) { quantize_activations(a, st); });
  // The copy floor: read the input and write as many bytes as the quantiser writes.
  const std::size_t written = packed + sbytes;
  const TimingStats tc = time_region(s, &flusher, timing, [&](cudaStream_t st) {
    CLI_CUDA_CHECK(cudaMemcpyAsync(copy.get(), x.get(), in_bytes, cudaMemcpyDeviceToDevice, st), "copy");
  });
  const double moved = static_cast<double>(in_bytes + written);
  const double q_tbps = moved / (tq.median_us * 1e-6) / 1e12, c_tbps = 2.0 * in_bytes / (tc.median_us * 1e-6) / 1e12;
  std::cout << "fp4gemm quantize: bf16 [" << o.rows << ", " << o.k << "] -> " << o.format << " (" << o.scales
            << " scales) on " << device.name << "\n"
            << "quantize: " << tq.median_us << " us median, " << q_tbps << " TB/s (" << moved / 1e6 << " MB moved)\n"
            << "copy (cudaMemcpyAsync D2D, " << in_bytes / 1e6 << " MB each way): " << tc.median_us << " us, " << c_tbps
            << " TB/s\n"
            << "quantize / copy bandwidth: " << q_tbps / c_tbps << "\n";
  if (!o.json.empty()) {
    Json doc;
    doc["tool"] = "fp4gemm quantize";
    doc["version"] = FP4GEMM_VERSION;
    doc["date"] = utc_now();
    doc["gpu"] = device_json(device);
    doc["shape"] = Json{{"rows", o.rows}, {"k", o.k}, {"format", o.format}, {"scales", o.scales}};
    doc["quantize_us"] = stats_json(tq);
    doc["copy_us"] = stats_json(tc);
    doc["quantize_tbps"] = q_tbps;
    doc["copy_tbps"] = c_tbps;
    write_json(o.json, doc);
  }
  return 0;
}

}  // namespace fp4gemm::cli
