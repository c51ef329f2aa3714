// `fp4gemm layer`: time the whole MoE expert layer (fp4gemm::MoeLayer) on a random top-k routing,
// with realistic data (random nibbles, scales in the normal range) and the memory floor of the
// active experts' weights. `fp4gemm quantize`: the GPU activation quantiser against a device copy
// of the same bytes.
#include <iostream>

#include "cli.hpp"
#include "data.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/quantize.hpp"
#include "kernels/decode_layer.hpp"  // decode_trace_report
#include "layer_problem.hpp"
#include "report.hpp"
#include "timing.hpp"

namespace fp4gemm::cli {

int run_layer(const LayerCommandOptions& o) {
  const LayerModel model{"layer", o.experts, o.hidden, o.inter, o.topk, o.activation == "swigluoai"};
  validate_layer_model(model, o.act);
  if (o.tokens < 1) throw Error("--tokens", -1, "must be >= 1");
  require_writable(o.json);
  const DeviceInfo device = require_device();
  Stream stream;
  const cudaStream_t s = stream.get();
  LayerProblemOptions lo;
  lo.fuse_quantise = o.fuse_quantise, lo.batch_invariant = o.batch_invariant, lo.decode_tokens = o.decode_tokens;
  lo.checkpoint_scales = o.values == "checkpoint", lo.scales = parse_layout(o.scales);
  lo.pieces = o.weight_layout == "pieces";
  LayerProblem problem(model, o.act, o.tokens, o.seed, s, lo);
  problem.set_tokens(o.tokens, o.seed, s);
  std::cout << "fp4gemm layer: E " << o.experts << ", H " << o.hidden << ", I " << o.inter << ", T " << o.tokens
            << ", top-" << o.topk << ", " << o.act << (problem.w4a16() ? " (W4A16)" : " (W4A4)") << ", "
            << o.activation << ", " << o.values << " weight scales (" << o.scales << "); "
            << problem.active_experts() << " experts active\n"
            << problem.describe() << "\n";
  problem.run(s);
  problem.check(s);

  TimingConfig timing;
  timing.iters = o.iters, timing.warmup = o.warmup;
  const L2Flusher flusher(device.l2_bytes);
  const TimingStats t = time_region(s, &flusher, timing, [&](cudaStream_t st) { problem.run(st); });
  const double flops = problem.flops(), bytes = problem.bytes();
  std::cout << time_line(t, flops, bytes) << "\n";
  std::cout << detail::decode_trace_report();  // a trace build's decode phases of the last run ("" otherwise)
  if (!o.json.empty()) {
    Json doc;
    doc["tool"] = "fp4gemm layer";
    doc["version"] = FP4GEMM_VERSION;
    doc["date"] = utc_now();
    doc["gpu"] = device_json(device);
    doc["shape"] = Json{{"experts", o.experts}, {"hidden", o.hidden}, {"inter", o.inter}, {"tokens", o.tokens},
                        {"topk", o.topk}};
    doc["settings"] = Json{{"act", o.act},
                           {"activation", o.activation},
                           {"seed", o.seed},
                           {"iters", o.iters},
                           {"decode_tokens", o.decode_tokens},
                           {"values", o.values},
                           {"scales", o.scales},
                           {"weight_layout", o.weight_layout},
                           {"batch_invariant", o.batch_invariant},
                           {"fuse_quantise", o.fuse_quantise}};
    doc["active_experts"] = problem.active_experts();
    doc["plan"] = problem.describe();
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
