// fp4gemm::EpExchange on raw device pointers (fp4gemm.ep.DeviceExchange checks the tensors and
// passes their addresses and torch's current stream).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fp4gemm/ep.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace fp4gemm::python {

namespace {

EpRows parse_rows(const std::string& s) {
  if (s == "bf16") return EpRows::bf16;
  if (s == "nvfp4") return EpRows::nvfp4;
  if (s == "mxfp4") return EpRows::mxfp4;
  throw Error("rows", -1, "'" + s + "' is not one of 'bf16', 'nvfp4', 'mxfp4'");
}

cudaStream_t as_stream(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

EpStepArgs step(std::uintptr_t hidden, std::int64_t ld_hidden, std::uintptr_t ids, bool ids_int64,
                std::uintptr_t weights, bool weights_bf16, int tokens, std::uintptr_t out) {
  EpStepArgs a;
  a.hidden = reinterpret_cast<const void*>(hidden), a.ld_hidden = ld_hidden;
  a.topk_ids = reinterpret_cast<const void*>(ids), a.ids_int64 = ids_int64;
  a.topk_weights = reinterpret_cast<const void*>(weights), a.weights_bf16 = weights_bf16;
  a.tokens = tokens, a.out = reinterpret_cast<void*>(out);
  return a;
}

}  // namespace

void bind_ep(nb::module_& m) {
  m.def(
      "ep_buffer_bytes",
      [](int world, int rank, int experts, int topk, int hidden, int max_tokens, const std::string& rows) {
        EpConfig c;
        c.world = world, c.rank = rank, c.experts = experts, c.topk = topk, c.hidden = hidden, c.max_tokens = max_tokens;
        c.rows = parse_rows(rows);
        return EpExchange::buffer_bytes(c);
      },
      "world"_a, "rank"_a, "experts"_a, "topk"_a, "hidden"_a, "max_tokens"_a, "rows"_a,
      "Bytes of each rank's exchange buffer (fp4gemm::EpExchange::buffer_bytes).");
  nb::class_<EpExchange>(m, "EpExchange", "fp4gemm::EpExchange on raw pointers (use fp4gemm.ep.DeviceExchange).")
      .def(
          "__init__",
          [](EpExchange* self, int world, int rank, int experts, int topk, int hidden, int max_tokens,
             const std::string& rows, float global_scale, int device, const std::vector<std::uintptr_t>& buffers) {
            EpConfig c;
            c.world = world, c.rank = rank, c.experts = experts, c.topk = topk, c.hidden = hidden;
            c.max_tokens = max_tokens, c.rows = parse_rows(rows), c.global_scale = global_scale, c.device = device;
            std::vector<void*> b;
            for (std::uintptr_t p : buffers) b.push_back(reinterpret_cast<void*>(p));
            nb::gil_scoped_release release;
            new (self) EpExchange(c, b);
          },
          "world"_a, "rank"_a, "experts"_a, "topk"_a, "hidden"_a, "max_tokens"_a, "rows"_a, "global_scale"_a,
          "device"_a, "buffers"_a)
      .def(
          "send_counts",
          [](const EpExchange& x, std::uintptr_t ids, bool ids_int64, int tokens, std::uintptr_t stream) {
            nb::gil_scoped_release release;
            x.send_counts(step(0, 0, ids, ids_int64, 0, false, tokens, 0), as_stream(stream));
          },
          "ids"_a, "ids_int64"_a, "tokens"_a, "stream"_a)
      .def(
          "send_rows",
          [](const EpExchange& x, std::uintptr_t hidden, std::int64_t ld_hidden, std::uintptr_t ids, bool ids_int64,
             int tokens, std::uintptr_t stream) {
            nb::gil_scoped_release release;
            x.send_rows(step(hidden, ld_hidden, ids, ids_int64, 0, false, tokens, 0), as_stream(stream));
          },
          "hidden"_a, "ld_hidden"_a, "ids"_a, "ids_int64"_a, "tokens"_a, "stream"_a)
      .def(
          "combine",
          [](const EpExchange& x, std::uintptr_t ids, bool ids_int64, std::uintptr_t weights, bool weights_bf16,
             int tokens, std::uintptr_t out, std::uintptr_t stream) {
            nb::gil_scoped_release release;
            x.combine(step(0, 0, ids, ids_int64, weights, weights_bf16, tokens, out), as_stream(stream));
          },
          "ids"_a, "ids_int64"_a, "weights"_a, "weights_bf16"_a, "tokens"_a, "out"_a, "stream"_a)
      .def("received",
           [](const EpExchange& x) {
             const EpReceived r = x.received();
             nb::dict d;
             d["capacity"] = r.capacity;
             d["counts"] = reinterpret_cast<std::uintptr_t>(r.counts);
             d["count"] = reinterpret_cast<std::uintptr_t>(r.count);
             d["ids"] = reinterpret_cast<std::uintptr_t>(r.ids);
             d["rows"] = reinterpret_cast<std::uintptr_t>(r.rows);
             d["packed"] = reinterpret_cast<std::uintptr_t>(r.packed);
             d["scales"] = reinterpret_cast<std::uintptr_t>(r.scales);
             d["y"] = reinterpret_cast<std::uintptr_t>(r.y);
             d["row_of"] = reinterpret_cast<std::uintptr_t>(r.row_of);
             d["topk"] = r.topk;
             return d;
           })
      .def("describe", &EpExchange::describe);
}

}  // namespace fp4gemm::python
