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
    case DType::other: return "an unsupported dtype";
  }
  return "?";
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
  torch_.dtype_refs.append(nb::borrow(reinterpret_cast<PyObject*>(torch_.tensor_type)));
  torch_.loaded = true;
  return true;
}

bool TensorReader::is_torch(nb::handle obj) {
  return torch_loaded() && PyObject_TypeCheck(obj.ptr(), torch_.tensor_type);
}

std::uintptr_t TensorReader::torch_data_ptr(nb::handle obj) {
  nb::object p = call_method0(obj, names().data_ptr);
  const unsigned long long v = PyLong_AsUnsignedLongLong(p.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) throw nb::python_error();
  return static_cast<std::uintptr_t>(v);
}

bool TensorReader::torch_shape_equals(nb::handle obj, const std::int64_t* shape, int ndim) {
  nb::object s = get_attr(obj, names().shape);
  if (!PyTuple_Check(s.ptr()) || PyTuple_GET_SIZE(s.ptr()) != ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (as_int64(PyTuple_GET_ITEM(s.ptr(), i)) != shape[i]) return false;
  return true;
}

TensorView TensorReader::read_torch(nb::handle obj, const std::string& arg, int group) {
  const Names& n = names();
  TensorView v;
  v.framework = Framework::torch;
  v.ndim = read_int_tuple(get_attr(obj, n.shape), v.shape, arg, group);
  if (read_int_tuple(call_method0(obj, n.stride), v.strides, arg, group) != v.ndim)
    throw Error(arg, group, "reports " + std::to_string(v.ndim) + " dimensions but a stride() of another length");

  const nb::object dtype = get_attr(obj, n.dtype);  // held while compared (by identity)
  PyObject* dt = dtype.ptr();
  const Torch& t = torch_;
  if (dt == t.u8 || dt == t.i8) v.dtype = DType::byte;
  else if (dt == t.f4x2) v.dtype = DType::fp4x2;
  else if (dt == t.e4m3) v.dtype = DType::e4m3;
  else if (dt == t.e8m0) v.dtype = DType::ue8m0;
  else if (dt == t.f16) v.dtype = DType::f16;
  else if (dt == t.bf16) v.dtype = DType::bf16;
  else if (dt == t.f32) v.dtype = DType::f32;
  else if (dt == t.i16 || dt == t.u16) v.dtype = DType::raw16;
  else v.dtype = DType::other;
  v.itemsize = (v.dtype == DType::f32) ? 4 : (v.dtype == DType::f16 || v.dtype == DType::bf16 || v.dtype == DType::raw16) ? 2 : 1;

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
  keep.push_back(std::move(arr));
  return v;
}

TensorView TensorReader::read(nb::handle obj, const std::string& arg, int group, bool writable, Keepalive& keep) {
  if (obj.is_none()) throw Error(arg, group, "is None");
  if (is_torch(obj)) return read_torch(obj, arg, group);
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

}  // namespace fp4gemm::python
