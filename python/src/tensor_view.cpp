// Reading array arguments: torch attribute probes, DLPack for everything else.
#include "tensor_view.hpp"

#include <cstring>
#include <string_view>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::python {

namespace {

// DLPack codes (dlpack.h v1.1); nanobind's enum stops at the classic ones.
enum : std::uint8_t {
  kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4,
  kDLFloat8_e4m3fn = 10, kDLFloat8_e8m0fnu = 14, kDLFloat4_e2m1fn = 17,
};
enum : int { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 };

struct Names {  // interned attribute names
  PyObject* data_ptr = PyUnicode_InternFromString("data_ptr");
  PyObject* shape = PyUnicode_InternFromString("shape");
  PyObject* stride = PyUnicode_InternFromString("stride");
  PyObject* dtype = PyUnicode_InternFromString("dtype");
  PyObject* is_cuda = PyUnicode_InternFromString("is_cuda");
  PyObject* is_cpu = PyUnicode_InternFromString("is_cpu");
  PyObject* get_device = PyUnicode_InternFromString("get_device");
  PyObject* untyped_storage = PyUnicode_InternFromString("untyped_storage");
  PyObject* nbytes = PyUnicode_InternFromString("nbytes");
  PyObject* base = PyUnicode_InternFromString("base");
};
const Names& names() {
  static const Names* n = new Names();  // leaked on purpose: lives as long as the interpreter
  return *n;
}

nb::object call_method0(nb::handle obj, PyObject* name) {
  PyObject* args[1] = {obj.ptr()};
  PyObject* r = PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
  if (!r) throw nb::python_error();
  return nb::steal(r);
}

nb::object get_attr(nb::handle obj, PyObject* name) {
  PyObject* r = PyObject_GetAttr(obj.ptr(), name);
  if (!r) throw nb::python_error();
  return nb::steal(r);
}

std::int64_t as_int64(PyObject* o) {
  const long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  return v;
}

// Copies a tuple of ints (torch.Size, stride()) into out; returns its length.
int read_int_tuple(nb::handle t, std::int64_t* out, const std::string& arg, int group) {
  if (!PyTuple_Check(t.ptr())) throw Error(arg, group, "expected a tuple of ints from the tensor");
  const Py_ssize_t n = PyTuple_GET_SIZE(t.ptr());
  if (n > kMaxDims)
    throw Error(arg, group, "has " + std::to_string(n) + " dimensions; at most " + std::to_string(kMaxDims) + " are supported");
  for (Py_ssize_t i = 0; i < n; ++i) out[i] = as_int64(PyTuple_GET_ITEM(t.ptr(), i));
  return static_cast<int>(n);
}

Framework framework_of(PyTypeObject* tp) {
  const std::string_view name = tp->tp_name;
  if (name.starts_with("cupy")) return Framework::cupy;
  if (name.starts_with("numpy")) return Framework::numpy;
  PyObject* mod = PyObject_GetAttrString(reinterpret_cast<PyObject*>(tp), "__module__");
  Framework f = Framework::other;
  if (mod && PyUnicode_Check(mod)) {
    const char* s = PyUnicode_AsUTF8(mod);
    if (s && std::string_view(s).starts_with("cupy")) f = Framework::cupy;
    if (s && std::string_view(s).starts_with("numpy")) f = Framework::numpy;
  }
  Py_XDECREF(mod);
  PyErr_Clear();
  return f;
}

DType dtype_from_dlpack(nb::dlpack::dtype t) {
  const int bits = t.bits * t.lanes;
  switch (t.code) {
    case kDLInt:
      return bits == 8 ? DType::byte : bits == 16 ? DType::raw16 : bits == 32 ? DType::i32 : bits == 64 ? DType::i64 : DType::other;
    case kDLUInt:
      return bits == 8 ? DType::byte : bits == 16 ? DType::raw16 : DType::other;
    case kDLFloat:
      return bits == 16 ? DType::f16 : bits == 32 ? DType::f32 : DType::other;
    case kDLBfloat: return bits == 16 ? DType::bf16 : DType::other;
    case kDLFloat8_e4m3fn: return bits == 8 ? DType::e4m3 : DType::other;
    case kDLFloat8_e8m0fnu: return bits == 8 ? DType::ue8m0 : DType::other;
    case kDLFloat4_e2m1fn: return bits == 8 ? DType::fp4x2 : DType::other;  // two lanes per byte
    default: return DType::other;
  }
}

// str(obj). (nb::str(obj.attr(...)) would adopt the attribute without converting it.)
std::string str_of(nb::handle h) {
  PyObject* s = PyObject_Str(h.ptr());
  if (!s) throw nb::python_error();
  return nb::cast<std::string>(nb::steal(s));
}

std::string type_text(nb::handle obj) {
  return std::string(Py_TYPE(obj.ptr())->tp_name);
}

std::uintptr_t as_address(nb::handle h) {
  const unsigned long long v = PyLong_AsUnsignedLongLong(h.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) throw nb::python_error();
  return static_cast<std::uintptr_t>(v);
}

// true when the int tuple `t` (torch.Size, stride()) equals v[0:n].
bool int_tuple_equals(nb::handle t, const std::int64_t* v, int n) {
  if (!PyTuple_Check(t.ptr()) || PyTuple_GET_SIZE(t.ptr()) != n) return false;
  for (int i = 0; i < n; ++i)
    if (as_int64(PyTuple_GET_ITEM(t.ptr(), i)) != v[i]) return false;
  return true;
}

// The bytes a buffer-protocol object spans: [lowest, highest + itemsize) over its elements.
bool buffer_extent(PyObject* obj, std::uintptr_t& begin, std::uintptr_t& end) {
  Py_buffer b;
  // Shape and strides only: no format (NumPy cannot describe extension dtypes such as ml_dtypes'
  // in a format string) and no writability (read-only buffers are fine here).
  if (PyObject_GetBuffer(obj, &b, PyBUF_STRIDES) != 0) {
    PyErr_Clear();
    return false;
  }
  auto lo = reinterpret_cast<std::intptr_t>(b.buf), hi = lo;
  bool empty = false;
  for (int i = 0; i < b.ndim; ++i) {
    if (b.shape[i] == 0) empty = true;
    const std::intptr_t span = (b.shape[i] - 1) * b.strides[i];
    (span < 0 ? lo : hi) += span;
  }
  begin = static_cast<std::uintptr_t>(lo);
  end = empty ? begin : static_cast<std::uintptr_t>(hi + b.itemsize);
  PyBuffer_Release(&b);
  return true;
}

// The allocation a NumPy array lives in: follow `.base` (ndarray views, as_strided's helper
// object) to the object that owns the memory — an ndarray without a base, or any other buffer
// (bytes, bytearray, mmap, memoryview) — and take that object's extent. False when the chain
// ends in something that exports no buffer.
bool numpy_allocation(nb::handle obj, std::uintptr_t& begin, std::uintptr_t& end) {
  nb::object o = nb::borrow(obj);
  for (int depth = 0; depth < 1000; ++depth) {  // bounded: a cycle of bases cannot hang the call
    PyObject* base = PyObject_GetAttr(o.ptr(), names().base);
    if (!base) {
      PyErr_Clear();  // no `base` attribute: o is the owner
      break;
    }
    if (base == Py_None) {
      Py_DECREF(base);
      break;
    }
    o = nb::steal(base);
  }
  return buffer_extent(o.ptr(), begin, end);
}

}  // namespace

const char* to_string(DType t) {
  switch (t) {
    case DType::byte: return "uint8";
    case DType::fp4x2: return "float4_e2m1fn_x2";
    case DType::e4m3: return "float8_e4m3fn";
    case DType::ue8m0: return "float8_e8m0fnu";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f32: return "float32";
    case DType::raw16: return "int16/uint16";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::other: return "an unsupported dtype";
  }
  return "?";
}

bool same_view(const TensorView& x, const TensorView& y) {
  if (x.ptr != y.ptr || x.ndim != y.ndim || x.dtype != y.dtype || x.itemsize != y.itemsize || x.cuda != y.cuda ||
      x.device != y.device || x.framework != y.framework || x.has_alloc != y.has_alloc ||
      x.alloc_begin != y.alloc_begin || x.alloc_end != y.alloc_end)
    return false;
  for (int i = 0; i < x.ndim; ++i)
    if (x.shape[i] != y.shape[i] || x.strides[i] != y.strides[i]) return false;
  return true;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

namespace {
// "(16, 64)", "(5,)". Plain string appends rather than an ostringstream: no iostream / locale
// state on the error paths (the process's global locale is whatever torch or others set).
std::string tuple_text(const std::int64_t* v, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  s += n == 1 ? ",)" : ")";
  return s;
}
}  // namespace

std::string TensorView::shape_text() const { return tuple_text(shape, ndim); }
std::string TensorView::strides_text() const { return tuple_text(strides, ndim); }
std::string TensorView::device_text() const {
  return cuda ? "cuda:" + std::to_string(device) : std::string("cpu");
}

// ---- torch -------------------------------------------------------------------------------------

bool TensorReader::torch_loaded() {
  if (torch_.loaded) return true;
  PyObject* torch = PyImport_GetModule(nb::str("torch").ptr());  // no import: only if loaded
  if (!torch) {
    PyErr_Clear();
    return false;
  }
  nb::object mod = nb::steal(torch);
  if (!nb::hasattr(mod, "Tensor") || !nb::hasattr(mod, "_C")) return false;  // partially imported
  torch_.tensor_type = reinterpret_cast<PyTypeObject*>(mod.attr("Tensor").ptr());
  nb::object c = mod.attr("_C");
  if (nb::hasattr(c, "_cuda_getCurrentRawStream")) torch_.raw_stream = c.attr("_cuda_getCurrentRawStream");
  auto dt = [&](const char* name) -> PyObject* {
    if (!nb::hasattr(mod, name)) return nullptr;
    nb::object o = mod.attr(name);
    torch_.dtype_refs.append(o);
    return o.ptr();
  };
  torch_.u8 = dt("uint8");
  torch_.i8 = dt("int8");
  torch_.f4x2 = dt("float4_e2m1fn_x2");
  torch_.e4m3 = dt("float8_e4m3fn");
  torch_.e8m0 = dt("float8_e8m0fnu");
  torch_.f16 = dt("float16");
  torch_.bf16 = dt("bfloat16");
  torch_.f32 = dt("float32");
  torch_.i16 = dt("int16");
  torch_.u16 = dt("uint16");
  torch_.i32 = dt("int32");
  torch_.i64 = dt("int64");
  torch_.dtype_refs.append(nb::borrow(reinterpret_cast<PyObject*>(torch_.tensor_type)));
  torch_.loaded = true;
  return true;
}

bool TensorReader::is_torch(nb::handle obj) {
  return torch_loaded() && PyObject_TypeCheck(obj.ptr(), torch_.tensor_type);
}

std::uintptr_t TensorReader::torch_data_ptr(nb::handle obj) {
  return as_address(call_method0(obj, names().data_ptr));
}

DType TensorReader::torch_dtype(nb::handle obj) {
  const nb::object dtype = get_attr(obj, names().dtype);  // held while compared (by identity)
  PyObject* dt = dtype.ptr();
  const Torch& t = torch_;
  if (dt == t.u8 || dt == t.i8) return DType::byte;
  if (dt == t.f4x2) return DType::fp4x2;
  if (dt == t.e4m3) return DType::e4m3;
  if (dt == t.e8m0) return DType::ue8m0;
  if (dt == t.f16) return DType::f16;
  if (dt == t.bf16) return DType::bf16;
  if (dt == t.f32) return DType::f32;
  if (dt == t.i16 || dt == t.u16) return DType::raw16;
  if (dt == t.i32) return DType::i32;
  if (dt == t.i64) return DType::i64;
  return DType::other;
}

bool TensorReader::torch_unchanged(nb::handle obj, std::uintptr_t ptr, DType dtype, const std::int64_t* shape,
                                   const std::int64_t* strides, int ndim) {
  const Names& n = names();
  return torch_data_ptr(obj) == ptr && int_tuple_equals(get_attr(obj, n.shape), shape, ndim) &&
         int_tuple_equals(call_method0(obj, n.stride), strides, ndim) && torch_dtype(obj) == dtype;
}

void TorchStates::add(const TensorView& v) {
  ptr_.push_back(v.ptr);
  dtype_.push_back(v.dtype);
  ndim_.push_back(static_cast<std::uint8_t>(v.ndim));
  offset_.push_back(static_cast<std::uint32_t>(dims_.size()));
  dims_.insert(dims_.end(), v.shape, v.shape + v.ndim);
  dims_.insert(dims_.end(), v.strides, v.strides + v.ndim);
}

bool TorchStates::unchanged(TensorReader& reader, std::size_t i, nb::handle obj) const {
  const std::int64_t* shape = dims_.data() + offset_[i];
  return reader.torch_unchanged(obj, ptr_[i], dtype_[i], shape, shape + ndim_[i], ndim_[i]);
}

nb::object TensorReader::torch_storage(nb::handle obj) {
  PyObject* args[1] = {obj.ptr()};
  PyObject* r = PyObject_VectorcallMethod(names().untyped_storage, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
  if (!r) {
    PyErr_Clear();  // tensors without a readable storage (wrapper subclasses, functional tensors)
    return nb::none();
  }
  return nb::steal(r);
}

int torch_itemsize(DType t) {
  return t == DType::i64                                                  ? 8
         : (t == DType::f32 || t == DType::i32)                           ? 4
         : (t == DType::f16 || t == DType::bf16 || t == DType::raw16) ? 2
                                                                          : 1;
}

TensorView TensorReader::read_torch(nb::handle obj, const std::string& arg, int group, bool bounds) {
  const Names& n = names();
  TensorView v;
  v.framework = Framework::torch;
  v.ndim = read_int_tuple(get_attr(obj, n.shape), v.shape, arg, group);
  if (read_int_tuple(call_method0(obj, n.stride), v.strides, arg, group) != v.ndim)
    throw Error(arg, group, "reports " + std::to_string(v.ndim) + " dimensions but a stride() of another length");

  v.dtype = torch_dtype(obj);
  v.itemsize = torch_itemsize(v.dtype);

  if (get_attr(obj, n.is_cuda).ptr() == Py_True) {
    v.cuda = true;
    v.device = static_cast<int>(as_int64(call_method0(obj, n.get_device).ptr()));
  } else if (get_attr(obj, n.is_cpu).ptr() == Py_True) {
    v.cuda = false;
  } else {
    throw Error(arg, group, "is a torch tensor on an unsupported device (" +
                                str_of(nb::object(obj.attr("device"))) + "); use CUDA or CPU tensors");
  }
  v.ptr = torch_data_ptr(obj);
  // The storage, not the view, bounds what may be touched: a view can outgrow it when the storage
  // is resized in place (untyped_storage().resize_()).
  if (!bounds) return v;
  const nb::object storage = torch_storage(obj);
  if (!storage.is_none()) {
    v.alloc_begin = as_address(call_method0(storage, n.data_ptr));
    v.alloc_end = v.alloc_begin + static_cast<std::uintptr_t>(as_int64(call_method0(storage, n.nbytes).ptr()));
    v.has_alloc = true;
  }
  return v;
}

// ---- DLPack ------------------------------------------------------------------------------------

TensorView TensorReader::read_dlpack(nb::handle obj, const std::string& arg, int group, bool writable,
                                     Keepalive& keep) {
  DType forced = DType::other;  // set when a NumPy extension dtype had to be viewed as raw bits
  nb::object source = nb::borrow(obj);
  nb::ndarray<nb::ro> arr;
  bool ok = nb::try_cast(source, arr, /*convert=*/false);
  if (!ok && nb::hasattr(obj, "dtype") && nb::hasattr(obj, "view")) {
    // ml_dtypes arrays (bfloat16, float8_*) cannot be exported by NumPy: view their bits.
    const std::string name = str_of(nb::object(obj.attr("dtype")));
    const char* raw = nullptr;
    if (name == "bfloat16") forced = DType::bf16, raw = "uint16";
    else if (name == "float8_e4m3fn") forced = DType::e4m3, raw = "uint8";
    else if (name == "float8_e8m0fnu") forced = DType::ue8m0, raw = "uint8";
    else if (name == "float4_e2m1fn")
      throw Error(arg, group, "has dtype float4_e2m1fn (one value per byte); packed FP4 holds two values per "
                              "byte: use fp4gemm.pack_fp4() or a uint8 array");
    if (raw) {
      source = obj.attr("view")(raw);
      ok = nb::try_cast(source, arr, /*convert=*/false);
    }
  }
  if (!ok)
    throw Error(arg, group, "expected an array supporting DLPack (torch, CuPy, JAX, NumPy, ...), got " + type_text(obj));
  if (writable) {
    nb::ndarray<> rw;
    if (!nb::try_cast(source, rw, /*convert=*/false))
      throw Error(arg, group, "is read-only; the output must be a writable array");
  }
  TensorView v;
  v.framework = framework_of(Py_TYPE(obj.ptr()));
  v.ndim = static_cast<int>(arr.ndim());
  if (v.ndim > kMaxDims)
    throw Error(arg, group, "has " + std::to_string(v.ndim) + " dimensions; at most " + std::to_string(kMaxDims) + " are supported");
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = static_cast<std::int64_t>(arr.shape(i));
    v.strides[i] = arr.stride(i);
  }
  v.dtype = forced != DType::other ? forced : dtype_from_dlpack(arr.dtype());
  v.itemsize = static_cast<int>((arr.dtype().bits * arr.dtype().lanes + 7) / 8);
  if (arr.dtype().code == kDLFloat4_e2m1fn && arr.dtype().bits * arr.dtype().lanes == 4)
    throw Error(arg, group, "is an unpacked float4 array (4 bits per element); pass the packed bytes as uint8");
  switch (arr.device_type()) {
    case kDLCPU:
    case kDLCUDAHost: v.cuda = false; break;
    case kDLCUDA:
    case kDLCUDAManaged: v.cuda = true, v.device = arr.device_id(); break;
    default:
      throw Error(arg, group, "lives on an unsupported device (DLPack device type " + std::to_string(arr.device_type()) + ")");
  }
  v.ptr = reinterpret_cast<std::uintptr_t>(arr.data());
  // NumPy does not bound views by their buffer (as_strided), so the binding checks them against it.
  if (v.framework == Framework::numpy) v.has_alloc = numpy_allocation(obj, v.alloc_begin, v.alloc_end);
  keep.push_back(std::move(arr));
  return v;
}

TensorView TensorReader::read(nb::handle obj, const std::string& arg, int group, bool writable, Keepalive& keep,
                              bool bounds) {
  if (obj.is_none()) throw Error(arg, group, "is None");
  if (is_torch(obj)) return read_torch(obj, arg, group, bounds);
  return read_dlpack(obj, arg, group, writable, keep);
}

std::uintptr_t TensorReader::current_stream(Framework f, int device) {
  if (f == Framework::torch && torch_loaded()) {
    if (torch_.raw_stream.is_valid()) return nb::cast<std::uintptr_t>(torch_.raw_stream(device));
    nb::object cuda = nb::module_::import_("torch.cuda");
    return nb::cast<std::uintptr_t>(cuda.attr("current_stream")(device).attr("cuda_stream"));
  }
  if (f == Framework::cupy) {
    nb::object cupy = nb::module_::import_("cupy");
    return nb::cast<std::uintptr_t>(cupy.attr("cuda").attr("get_current_stream")().attr("ptr"));
  }
  return 0;
}

// ---- weak references ---------------------------------------------------------------------------

nb::object weak_ref(nb::handle obj) {
  PyObject* r = PyWeakref_NewRef(obj.ptr(), nullptr);
  if (!r) {
    PyErr_Clear();
    return nb::none();
  }
  return nb::steal(r);
}

bool weak_ref_is(nb::handle ref, nb::handle obj) {
  if (ref.is_none()) return false;
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* target = nullptr;
  if (PyWeakref_GetRef(ref.ptr(), &target) < 0) {
    PyErr_Clear();
    return false;
  }
  const bool same = target == obj.ptr();
  Py_XDECREF(target);
  return same;
#else
  return PyWeakref_GetObject(ref.ptr()) == obj.ptr();
#endif
}

std::optional<std::uint64_t> torch_version(nb::handle obj) {
  static PyObject* const name = PyUnicode_InternFromString("_version");
  PyObject* v = PyObject_GetAttr(obj.ptr(), name);
  if (v == nullptr) {
    PyErr_Clear();
    return std::nullopt;
  }
  const unsigned long long version = PyLong_AsUnsignedLongLong(v);
  Py_DECREF(v);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return std::nullopt;
  }
  return version;
}

void CopiedArrays::add(nb::handle obj) {
  if (const auto v = torch_version(obj)) {
    objs_.push_back(obj);
    versions_.push_back(*v);
  }
}

bool CopiedArrays::changed() const {
  for (std::size_t i = 0; i < objs_.size(); ++i)
    if (torch_version(objs_[i]).value_or(versions_[i]) != versions_[i]) return true;
  return false;
}

std::vector<std::uint64_t> CopiedArrays::versions_now() const {
  std::vector<std::uint64_t> now(objs_.size());
  for (std::size_t i = 0; i < objs_.size(); ++i) now[i] = torch_version(objs_[i]).value_or(versions_[i]);
  return now;
}

}  // namespace fp4gemm::python
