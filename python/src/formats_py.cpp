// NumPy bindings of the host format helpers: codecs, scale layouts, quantise / dequantise.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>

#include <cstdint>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "grouped.hpp"

namespace fp4gemm::python {

namespace {

using F32In = nb::ndarray<const float, nb::device::cpu, nb::c_contig>;
using U8In = nb::ndarray<const std::uint8_t, nb::device::cpu, nb::c_contig>;
template <typename T>
using NpOut = nb::ndarray<nb::numpy, T>;

template <typename T>
NpOut<T> new_array(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (std::size_t s : shape) n *= s;
  T* data = new T[n > 0 ? n : 1]();
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return NpOut<T>(data, shape.size(), shape.data(), owner);
}

template <typename A>
std::vector<std::size_t> shape_of(const A& a) {
  std::vector<std::size_t> s(a.ndim());
  for (std::size_t i = 0; i < a.ndim(); ++i) s[i] = a.shape(i);
  return s;
}

std::pair<NpOut<std::uint8_t>, NpOut<std::uint8_t>> quantize(const F32In& x, nb::handle format, float global_scale) {
  const Format f = parse_format(format);
  if (x.ndim() != 2) throw Error("x", -1, "must be 2-D [rows, K], got " + std::to_string(x.ndim()) + "-D");
  const auto rows = static_cast<std::int64_t>(x.shape(0)), k = static_cast<std::int64_t>(x.shape(1));
  const int vec = scale_block_size(f);
  if (k % vec != 0)
    throw Error("x", -1, "K = " + std::to_string(k) + " is not a multiple of the " + to_string(f) + " scale block (" +
                             std::to_string(vec) + ")");
  auto packed = new_array<std::uint8_t>({static_cast<std::size_t>(rows), static_cast<std::size_t>(k / 2)});
  auto scales = new_array<std::uint8_t>({static_cast<std::size_t>(rows), static_cast<std::size_t>(k / vec)});
  {
    nb::gil_scoped_release release;
    formats::quantize(f, x.data(), rows, k, k, packed.data(), scales.data(), global_scale);
  }
  return {packed, scales};
}

NpOut<float> dequantize(const U8In& packed, const U8In& scales, nb::handle format, nb::handle layout, std::int64_t k) {
  const Format f = parse_format(format);
  const ScaleLayout l = parse_layout(layout);
  if (packed.ndim() != 2) throw Error("packed", -1, "must be 2-D [rows, K/2], got " + std::to_string(packed.ndim()) + "-D");
  const auto rows = static_cast<std::int64_t>(packed.shape(0)), ld = static_cast<std::int64_t>(packed.shape(1));
  if (k < 0) k = 2 * ld;
  if (k > 2 * ld) throw Error("k", -1, "K = " + std::to_string(k) + " exceeds the " + std::to_string(2 * ld) + " values per packed row");
  const int vec = scale_block_size(f);
  if (k % vec != 0)
    throw Error("k", -1, "K = " + std::to_string(k) + " is not a multiple of the " + to_string(f) + " scale block (" +
                             std::to_string(vec) + ")");
  const std::size_t need = formats::scale_bytes(l, rows, k / vec);
  if (scales.size() != need)
    throw Error("scales", -1, "has " + std::to_string(scales.size()) + " bytes; " + to_string(l) + " scales of a [" +
                                  std::to_string(rows) + ", " + std::to_string(k) + "] " + to_string(f) + " matrix need " +
                                  std::to_string(need));
  auto out = new_array<float>({static_cast<std::size_t>(rows), static_cast<std::size_t>(k)});
  {
    nb::gil_scoped_release release;
    formats::dequantize(f, l, packed.data(), rows, k, ld, scales.data(), out.data());
  }
  return out;
}

NpOut<std::uint8_t> linear_to_blocked(const U8In& scales) {
  if (scales.ndim() != 2) throw Error("scales", -1, "must be 2-D [rows, K/vec], got " + std::to_string(scales.ndim()) + "-D");
  const auto rows = static_cast<std::int64_t>(scales.shape(0)), cols = static_cast<std::int64_t>(scales.shape(1));
  auto out = new_array<std::uint8_t>({formats::blocked_scale_bytes(rows, cols)});
  formats::linear_to_blocked(scales.data(), rows, cols, out.data());
  return out;
}

NpOut<std::uint8_t> blocked_to_linear(const U8In& blocked, std::int64_t rows, std::int64_t cols) {
  if (rows < 0 || cols < 0) throw Error("rows", -1, "rows and cols must be >= 0");
  const std::size_t need = formats::blocked_scale_bytes(rows, cols);
  if (blocked.size() != need)
    throw Error("blocked", -1, "has " + std::to_string(blocked.size()) + " bytes; the blocked layout of [" +
                                   std::to_string(rows) + ", " + std::to_string(cols) + "] scales has " + std::to_string(need));
  auto out = new_array<std::uint8_t>({static_cast<std::size_t>(rows), static_cast<std::size_t>(cols)});
  formats::blocked_to_linear(blocked.data(), rows, cols, out.data());
  return out;
}

template <typename Out, typename In, typename Fn>
NpOut<Out> map_elements(const In& in, Fn fn) {
  auto out = new_array<Out>(shape_of(in));
  const auto* src = in.data();
  Out* dst = out.data();
  for (std::size_t i = 0, n = in.size(); i < n; ++i) dst[i] = fn(src[i]);
  return out;
}

}  // namespace

void bind_formats(nb::module_& m) {
  m.def("quantize", &quantize, nb::arg("x"), nb::arg("format"), nb::arg("global_scale") = 1.0f,
        "Quantise float32 [rows, K] to (packed uint8 [rows, K/2], linear scales uint8 [rows, K/vec]).");
  m.def("dequantize", &dequantize, nb::arg("packed"), nb::arg("scales"), nb::arg("format"), nb::arg("scale_layout"),
        nb::arg("k") = -1, "Exact dequantisation of packed FP4 rows to float32 [rows, K].");
  m.def("linear_to_blocked", &linear_to_blocked, nb::arg("scales"),
        "Linear [rows, cols] scales -> the blocked layout (flat uint8, rows padded to 128, cols to 4).");
  m.def("blocked_to_linear", &blocked_to_linear, nb::arg("blocked"), nb::arg("rows"), nb::arg("cols"),
        "Blocked-layout scales -> linear [rows, cols].");
  m.def("decode_e2m1", [](const U8In& codes) { return map_elements<float>(codes, formats::e2m1_to_float); },
        nb::arg("codes"), "e2m1 nibbles (low 4 bits of each byte) -> float32.");
  m.def("encode_e2m1", [](const F32In& x) { return map_elements<std::uint8_t>(x, formats::float_to_e2m1); },
        nb::arg("x"), "float32 -> e2m1 nibbles (round to nearest even, saturating).");
  m.def("decode_scales", [](const U8In& codes, nb::handle format) {
          const Format f = parse_format(format);
          return map_elements<float>(codes, [f](std::uint8_t c) { return formats::scale_to_float(f, c); });
        }, nb::arg("codes"), nb::arg("format"), "Scale codes (E4M3 for nvfp4, UE8M0 for mxfp4) -> float32.");
  m.def("encode_scales", [](const F32In& x, nb::handle format) {
          const Format f = parse_format(format);
          return map_elements<std::uint8_t>(x, f == Format::nvfp4 ? formats::float_to_e4m3 : formats::float_to_ue8m0);
        }, nb::arg("x"), nb::arg("format"), "float32 -> scale codes (E4M3 RNE for nvfp4, UE8M0 ceil for mxfp4).");
  m.def("scale_bytes", [](nb::handle layout, std::int64_t rows, std::int64_t cols) {
          return formats::scale_bytes(parse_layout(layout), rows, cols);
        }, nb::arg("scale_layout"), nb::arg("rows"), nb::arg("cols"), "Bytes of a [rows, cols] scale matrix in a layout.");
  m.def("scale_block_size", [](nb::handle format) { return scale_block_size(parse_format(format)); },
        nb::arg("format"), "K-elements per scale: 16 (nvfp4) or 32 (mxfp4).");
}

}  // namespace fp4gemm::python
