// What the binding needs to know about one array argument, read from any DLPack producer.
//
// NOTES: torch tensors are read through a handful of C-level attribute probes (data_ptr(), shape,
// stride(), dtype, is_cuda, get_device()) instead of DLPack: torch's __dlpack__ is a Python
// function costing microseconds per tensor, and it cannot export float4_e2m1fn_x2. Everything
// else (CuPy, JAX, NumPy, nanobind arrays, ...) goes through nb::ndarray, i.e. DLPack or the
// buffer protocol.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fp4gemm::python {

namespace nb = nanobind;

// Element types the binding distinguishes. `byte` is any 8-bit integer (raw codes), `raw16` any
// 16-bit integer (raw output bits).
enum class DType : std::uint8_t { byte, fp4x2, e4m3, ue8m0, f16, bf16, f32, raw16, other };
const char* to_string(DType t);

enum class Framework : std::uint8_t { torch, cupy, numpy, other };

inline constexpr int kMaxDims = 8;

struct TensorView {
  std::uintptr_t ptr = 0;  // first element (byte offset applied)
  int ndim = 0;
  std::int64_t shape[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};  // elements
  DType dtype = DType::other;
  int itemsize = 0;
  bool cuda = false;  // false: host memory the CPU can read
  int device = -1;    // CUDA ordinal
  Framework framework = Framework::other;

  std::int64_t numel() const;
  std::string shape_text() const;    // "(80, 3584, 1)"
  std::string strides_text() const;
  std::string device_text() const;   // "cuda:0" / "cpu"
};

// Keeps DLPack imports alive for the duration of one call.
using Keepalive = std::vector<nb::ndarray<nb::ro>>;

class TensorReader {
 public:
  // Reads `obj`; `arg` names it in errors ("a[3]"), `group` is its group (-1: none).
  // Throws fp4gemm::Error for objects that are not arrays or live on an unsupported device.
  TensorView read(nb::handle obj, const std::string& arg, int group, bool writable, Keepalive& keep);

  // torch fast path, also used to re-validate memoised calls.
  bool is_torch(nb::handle obj);
  std::uintptr_t torch_data_ptr(nb::handle obj);
  // true when obj.shape equals shape[0:ndim].
  bool torch_shape_equals(nb::handle obj, const std::int64_t* shape, int ndim);

  // The stream a framework considers current on `device` (torch, CuPy), else 0 (legacy stream).
  std::uintptr_t current_stream(Framework f, int device);

 private:
  bool torch_loaded();
  TensorView read_torch(nb::handle obj, const std::string& arg, int group);
  TensorView read_dlpack(nb::handle obj, const std::string& arg, int group, bool writable, Keepalive& keep);

  struct Torch {
    bool loaded = false;
    PyTypeObject* tensor_type = nullptr;
    nb::object raw_stream;  // torch._C._cuda_getCurrentRawStream
    // dtype objects, compared by identity
    PyObject *u8 = nullptr, *i8 = nullptr, *f4x2 = nullptr, *e4m3 = nullptr, *e8m0 = nullptr,
             *f16 = nullptr, *bf16 = nullptr, *f32 = nullptr, *i16 = nullptr, *u16 = nullptr;
    nb::list dtype_refs;  // keeps the dtype objects alive
  } torch_;
};

// Object identity helpers (weak references) for the call memo.
nb::object weak_ref(nb::handle obj);  // None when obj does not support weak references
bool weak_ref_is(nb::handle ref, nb::handle obj);

}  // namespace fp4gemm::python
