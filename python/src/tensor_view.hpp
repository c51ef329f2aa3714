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
#include <optional>
#include <string>
#include <vector>

namespace fp4gemm::python {

namespace nb = nanobind;

// Element types the binding distinguishes. `byte` is any 8-bit integer (raw codes), `raw16` any
// 16-bit integer (raw output bits), `i32` a signed 32-bit integer (MoE routing: offsets, counts,
// gather indices).
enum class DType : std::uint8_t { byte, fp4x2, e4m3, ue8m0, f16, bf16, f32, raw16, i32, i64, other };
const char* to_string(DType t);
// Bytes per element of a torch tensor of that type (other: 1).
int torch_itemsize(DType t);

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
  // The allocation the array lives in, where the binding can see it: a torch tensor's storage,
  // the buffer a NumPy array's chain of bases ends in. [alloc_begin, alloc_end); has_alloc false
  // when unknown (other DLPack producers: fp4gemm's own checks of device pointers apply there).
  bool has_alloc = false;
  std::uintptr_t alloc_begin = 0, alloc_end = 0;

  std::int64_t numel() const;
  std::string shape_text() const;    // "(80, 3584, 1)"
  std::string strides_text() const;
  std::string device_text() const;   // "cuda:0" / "cpu"
};

// Whether two reads describe the same array: address, shape, strides, dtype, device, framework and
// storage bounds.
bool same_view(const TensorView& x, const TensorView& y);

// Keeps DLPack imports alive for the duration of one call.
using Keepalive = std::vector<nb::ndarray<nb::ro>>;

class TensorReader {
 public:
  // Reads `obj`; `arg` names it in errors ("a[3]"), `group` is its group (-1: none).
  // Throws fp4gemm::Error for objects that are not arrays or live on an unsupported device.
  // bounds false: a torch tensor's storage is not probed (has_alloc stays false; callers that
  // do not check_in_allocation save three torch calls, ~0.35 us, per tensor).
  TensorView read(nb::handle obj, const std::string& arg, int group, bool writable, Keepalive& keep,
                  bool bounds = true);

  bool is_torch(nb::handle obj);
  // data_ptr() of a torch tensor (is_torch(obj)).
  std::uintptr_t torch_data_ptr(nb::handle obj);
  // true when the torch tensor `obj` has this data_ptr(), dtype, shape and strides (see TorchStates).
  bool torch_unchanged(nb::handle obj, std::uintptr_t ptr, DType dtype, const std::int64_t* shape,
                       const std::int64_t* strides, int ndim);
  // The untyped storage behind a torch tensor (None where it has none that can be read).
  nb::object torch_storage(nb::handle obj);

  // The stream a framework considers current on `device` (torch, CuPy), else 0 (legacy stream).
  std::uintptr_t current_stream(Framework f, int device);

 private:
  bool torch_loaded();
  TensorView read_torch(nb::handle obj, const std::string& arg, int group, bool bounds);
  DType torch_dtype(nb::handle obj);
  TensorView read_dlpack(nb::handle obj, const std::string& arg, int group, bool writable, Keepalive& keep);

  struct Torch {
    bool loaded = false;
    PyTypeObject* tensor_type = nullptr;
    nb::object raw_stream;  // torch._C._cuda_getCurrentRawStream
    // dtype objects, compared by identity
    PyObject *u8 = nullptr, *i8 = nullptr, *f4x2 = nullptr, *e4m3 = nullptr, *e8m0 = nullptr,
             *f16 = nullptr, *bf16 = nullptr, *f32 = nullptr, *i16 = nullptr, *u16 = nullptr, *i32 = nullptr, *i64 = nullptr;
    nb::list dtype_refs;  // keeps the dtype objects alive
  } torch_;
};

// The state of a list of torch tensors that a plan built from them depends on, as read when it
// was built: data_ptr() (which includes the storage offset), dtype, shape and strides. The device
// follows from the address: CUDA's unified address space gives host and device allocations
// distinct addresses. The call memo and GroupedGemm re-check tensor objects against it instead of
// reading and validating them again in full: in-place set_(), resize_(), transpose_(),
// as_strided_(), .data = ... all change it. Kept compactly (one per memoised call).
class TorchStates {
 public:
  void add(const TensorView& v);  // v: read from a torch tensor
  std::size_t size() const { return ptr_.size(); }
  // true when torch tensor `obj` still has the state of entry i.
  bool unchanged(TensorReader& reader, std::size_t i, nb::handle obj) const;

 private:
  std::vector<std::uintptr_t> ptr_;
  std::vector<std::uint32_t> offset_;  // into dims_: shape, then strides
  std::vector<std::uint8_t> ndim_;
  std::vector<DType> dtype_;
  std::vector<std::int64_t> dims_;
};

// torch's in-place change counter of `obj` (shared by a tensor and its views); nullopt for
// inference tensors (no counter: they cannot change in place) and other arrays. Needs the GIL.
std::optional<std::uint64_t> torch_version(nb::handle obj);

// The torch arrays an object copies from at set-up (a plan's scale copies), each with its
// _version when last copied: changed() says whether any was written in place since (the caller
// then makes its copies again through recopy()). Objects are borrowed: the owner keeps them.
// Needs the GIL.
class CopiedArrays {
 public:
  void add(nb::handle obj);  // no-op for arrays without a version counter
  bool empty() const { return objs_.empty(); }
  bool changed() const;
  // Runs `remake()` (the copies made again, with the GIL released) and records the versions read
  // before it: a write during the copy is seen by the next changed(). Nothing is recorded when
  // remake throws.
  template <class F>
  void recopy(F&& remake) {
    const std::vector<std::uint64_t> now = versions_now();
    {
      nb::gil_scoped_release release;
      remake();
    }
    versions_ = now;
  }

 private:
  std::vector<std::uint64_t> versions_now() const;
  std::vector<nb::handle> objs_;
  std::vector<std::uint64_t> versions_;
};

// Object identity helpers (weak references) for the call memo.
nb::object weak_ref(nb::handle obj);  // None when obj does not support weak references
bool weak_ref_is(nb::handle ref, nb::handle obj);

}  // namespace fp4gemm::python
