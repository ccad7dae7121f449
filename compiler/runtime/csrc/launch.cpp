// Loading and launching compiled Triton kernels through the CUDA driver, without the C
// modules Triton builds with the C compiler.
//
// Triton launches a kernel through a launcher it generates per kernel signature and builds
// with gcc (0.2-0.8 s each in a fresh cache), and loads binaries through a driver module it
// also builds with gcc (about 0.8 s, once per cache). A cold first call of one small kernel
// spent more time in those builds than in compiling the kernel. Our kernels take only
// pointers (their block sizes and sizes are compile-time constants), so one launcher built
// ahead of time with this extension serves every kernel: `cuda_load` loads a cubin and
// returns its function, and a `CudaLaunch` bound to that function, its grid, warps and
// shared memory is called with the stream and the pointers.
//
// A `CudaLaunch` also checks the pointers' 16-byte alignment against the alignment the
// kernel was compiled for (Triton specialises aligned pointers into vector loads): on a
// mismatch it launches nothing and returns False, and the caller picks, or compiles, the
// kernel for that alignment. It returns True after a launch.
//
// libcuda is opened with dlopen on first use, as Triton's own launcher does, so the extension
// builds and loads on machines without CUDA. The kernel parameter layout is Triton 3.6's: the
// pointers, then its global and profile scratch pointers (null: compiler/runtime/
// triton_binary.py launches only kernels that need no scratch memory).

#include "cpp_ext.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;

constexpr int kFuncMaxThreadsPerBlock = 0;  // CU_FUNC_ATTRIBUTE_* (cuda.h)
constexpr int kFuncSharedSizeBytes = 1;
constexpr int kFuncLocalSizeBytes = 3;
constexpr int kFuncNumRegs = 4;
constexpr int kFuncMaxDynamicSharedSizeBytes = 8;
constexpr int kFuncCachePreferShared = 1;             // CU_FUNC_CACHE_PREFER_SHARED
constexpr int kDeviceMaxSharedPerBlockOptin = 97;     // CU_DEVICE_ATTRIBUTE_*
constexpr int kStaticSharedLimit = 49152;             // what a kernel gets without opting in

struct CudaApi {
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuFuncSetCacheConfig)(CUfunction, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void**, void**);
};

CudaApi cuda_api;
bool cuda_api_loaded = false;

// Fills cuda_api from libcuda; false with a Python error set when it cannot.
bool load_cuda_api() {
  if (cuda_api_loaded) {
    return true;
  }
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "cannot open libcuda.so.1: no CUDA driver here");
    return false;
  }
  struct Entry {
    const char* name;
    void** slot;
  };
  const Entry entries[] = {
      {"cuGetErrorString", reinterpret_cast<void**>(&cuda_api.cuGetErrorString)},
      {"cuCtxGetCurrent", reinterpret_cast<void**>(&cuda_api.cuCtxGetCurrent)},
      {"cuCtxSetCurrent", reinterpret_cast<void**>(&cuda_api.cuCtxSetCurrent)},
      {"cuDeviceGet", reinterpret_cast<void**>(&cuda_api.cuDeviceGet)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void**>(&cuda_api.cuDevicePrimaryCtxRetain)},
      {"cuDeviceGetAttribute", reinterpret_cast<void**>(&cuda_api.cuDeviceGetAttribute)},
      {"cuModuleLoadData", reinterpret_cast<void**>(&cuda_api.cuModuleLoadData)},
      {"cuModuleGetFunction", reinterpret_cast<void**>(&cuda_api.cuModuleGetFunction)},
      {"cuFuncGetAttribute", reinterpret_cast<void**>(&cuda_api.cuFuncGetAttribute)},
      {"cuFuncSetAttribute", reinterpret_cast<void**>(&cuda_api.cuFuncSetAttribute)},
      {"cuFuncSetCacheConfig", reinterpret_cast<void**>(&cuda_api.cuFuncSetCacheConfig)},
      {"cuLaunchKernel", reinterpret_cast<void**>(&cuda_api.cuLaunchKernel)},
  };
  for (const Entry& e : entries) {
    *e.slot = dlsym(lib, e.name);
    if (*e.slot == nullptr) {
      PyErr_Format(PyExc_RuntimeError, "libcuda.so.1 has no %s", e.name);
      return false;
    }
  }
  cuda_api_loaded = true;
  return true;
}

// Sets a RuntimeError naming the call and CUDA's message; returns false when `code` is one.
bool cuda_ok(CUresult code, const char* what) {
  if (code == 0) {
    return true;
  }
  const char* message = nullptr;
  if (cuda_api.cuGetErrorString(code, &message) != 0 || message == nullptr) {
    message = "unknown error";
  }
  PyErr_Format(PyExc_RuntimeError, "CUDA error in %s: %s (%d)", what, message, code);
  return false;
}

// cuda_load(cubin: bytes, name: str, shared: int, device: int)
//     -> (function: int, n_regs: int, n_spills: int, max_threads: int)
// Loads the cubin into the device's current context (its primary context when the thread
// has none) and opts the function in to more than 48 KiB of shared memory when it needs it.
// The module stays loaded for the process, as Triton's do.
PyObject* cuda_load(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4 || !PyBytes_Check(args[0]) || !PyUnicode_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "cuda_load(cubin: bytes, name: str, shared: int, device: int)");
    return nullptr;
  }
  const char* name = PyUnicode_AsUTF8(args[1]);
  long shared = PyLong_AsLong(args[2]);
  long ordinal = PyLong_AsLong(args[3]);
  if (name == nullptr || PyErr_Occurred() || !load_cuda_api()) {
    return nullptr;
  }
  const char* cubin = PyBytes_AS_STRING(args[0]);
  CUcontext ctx = nullptr;
  CUdevice device = 0;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  int n_regs = 0, n_spills = 0, max_threads = 0, optin = 0;
  if (!cuda_ok(cuda_api.cuDeviceGet(&device, static_cast<int>(ordinal)), "cuDeviceGet") ||
      !cuda_ok(cuda_api.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent")) {
    return nullptr;
  }
  if (ctx == nullptr) {
    if (!cuda_ok(cuda_api.cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain") ||
        !cuda_ok(cuda_api.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")) {
      return nullptr;
    }
  }
  if (!cuda_ok(cuda_api.cuModuleLoadData(&module, cubin), "cuModuleLoadData") ||
      !cuda_ok(cuda_api.cuModuleGetFunction(&function, module, name), "cuModuleGetFunction") ||
      !cuda_ok(cuda_api.cuFuncGetAttribute(&n_regs, kFuncNumRegs, function), "cuFuncGetAttribute") ||
      !cuda_ok(cuda_api.cuFuncGetAttribute(&n_spills, kFuncLocalSizeBytes, function),
               "cuFuncGetAttribute") ||
      !cuda_ok(cuda_api.cuFuncGetAttribute(&max_threads, kFuncMaxThreadsPerBlock, function),
               "cuFuncGetAttribute") ||
      !cuda_ok(cuda_api.cuDeviceGetAttribute(&optin, kDeviceMaxSharedPerBlockOptin, device),
               "cuDeviceGetAttribute")) {
    return nullptr;
  }
  if (shared > kStaticSharedLimit && optin > kStaticSharedLimit) {
    int shared_static = 0;
    if (!cuda_ok(cuda_api.cuFuncSetCacheConfig(function, kFuncCachePreferShared),
                 "cuFuncSetCacheConfig") ||
        !cuda_ok(cuda_api.cuFuncGetAttribute(&shared_static, kFuncSharedSizeBytes, function),
                 "cuFuncGetAttribute") ||
        !cuda_ok(cuda_api.cuFuncSetAttribute(function, kFuncMaxDynamicSharedSizeBytes,
                                             optin - shared_static),
                 "cuFuncSetAttribute")) {
      return nullptr;
    }
  }
  return Py_BuildValue("(Kiii)", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(function)),
                       n_regs, n_spills / 4, max_threads);
}

constexpr Py_ssize_t kMaxPointers = 256;

struct Launch {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  CUfunction function;
  unsigned grid[3];
  unsigned threads;
  unsigned shared;
  Py_ssize_t n_pointers;
  uint64_t aligned[(kMaxPointers + 63) / 64];  // bit k: pointer k was compiled as 16-aligned
};

// Called as launch(stream, *pointers): a launch on `stream`, or False (no launch) when a
// pointer's alignment is not the one the kernel was compiled for.
PyObject* launch_call(PyObject* self_obj, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<Launch*>(self_obj);
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (kwnames != nullptr || nargs != self->n_pointers + 1) {
    PyErr_Format(PyExc_TypeError, "CudaLaunch takes the stream and %zd pointers", self->n_pointers);
    return nullptr;
  }
  auto stream = reinterpret_cast<CUstream>(PyLong_AsUnsignedLongLong(args[0]));
  uint64_t pointers[kMaxPointers + 2];
  void* params[kMaxPointers + 2];
  for (Py_ssize_t k = 0; k < self->n_pointers; ++k) {
    pointers[k] = PyLong_AsUnsignedLongLong(args[k + 1]);
    bool want = (self->aligned[k / 64] >> (k % 64)) & 1;
    if (want != (pointers[k] % 16 == 0)) {
      if (PyErr_Occurred()) {
        return nullptr;
      }
      Py_RETURN_FALSE;
    }
    params[k] = &pointers[k];
  }
  if (PyErr_Occurred()) {
    return nullptr;
  }
  pointers[self->n_pointers] = 0;  // Triton's global scratch
  pointers[self->n_pointers + 1] = 0;  // and profile scratch
  params[self->n_pointers] = &pointers[self->n_pointers];
  params[self->n_pointers + 1] = &pointers[self->n_pointers + 1];
  if (self->grid[0] == 0 || self->grid[1] == 0 || self->grid[2] == 0) {
    Py_RETURN_TRUE;
  }
  if (!cuda_ok(cuda_api.cuLaunchKernel(self->function, self->grid[0], self->grid[1], self->grid[2],
                                       self->threads, 1, 1, self->shared, stream, params, nullptr),
               "cuLaunchKernel")) {
    return nullptr;
  }
  Py_RETURN_TRUE;
}

// CudaLaunch(function, grid: (x, y, z), num_warps, shared, aligned: tuple[bool, ...])
int launch_init(PyObject* self_obj, PyObject* args, PyObject* kwargs) {
  auto* self = reinterpret_cast<Launch*>(self_obj);
  unsigned long long function = 0;
  unsigned gx = 0, gy = 0, gz = 0, warps = 0, shared = 0;
  PyObject* aligned = nullptr;
  if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) {
    PyErr_SetString(PyExc_TypeError, "CudaLaunch takes positional arguments");
    return -1;
  }
  if (!PyArg_ParseTuple(args, "K(III)IIO!", &function, &gx, &gy, &gz, &warps, &shared,
                        &PyTuple_Type, &aligned)) {
    return -1;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(aligned);
  if (n > kMaxPointers) {
    PyErr_Format(PyExc_ValueError, "CudaLaunch takes at most %zd pointers", kMaxPointers);
    return -1;
  }
  if (!load_cuda_api()) {
    return -1;
  }
  self->function = reinterpret_cast<CUfunction>(static_cast<uintptr_t>(function));
  self->grid[0] = gx;
  self->grid[1] = gy;
  self->grid[2] = gz;
  self->threads = 32 * warps;
  self->shared = shared;
  self->n_pointers = n;
  std::fill(std::begin(self->aligned), std::end(self->aligned), 0);
  for (Py_ssize_t k = 0; k < n; ++k) {
    int truth = PyObject_IsTrue(PyTuple_GET_ITEM(aligned, k));
    if (truth < 0) {
      return -1;
    }
    if (truth) {
      self->aligned[k / 64] |= uint64_t{1} << (k % 64);
    }
  }
  self->vectorcall = launch_call;
  return 0;
}

PyTypeObject LaunchType = {PyVarObject_HEAD_INIT(nullptr, 0)};

void set_up_launch_type() {
  LaunchType.tp_name = "_jc_cpp_ext.CudaLaunch";
  LaunchType.tp_doc =
      "CudaLaunch(function, grid, num_warps, shared, aligned): called with (stream, *pointers), "
      "launches the loaded kernel; False, launching nothing, when a pointer's 16-byte "
      "alignment is not the one in `aligned`.";
  LaunchType.tp_basicsize = sizeof(Launch);
  LaunchType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  LaunchType.tp_new = PyType_GenericNew;
  LaunchType.tp_init = launch_init;
  LaunchType.tp_call = PyVectorcall_Call;
  LaunchType.tp_vectorcall_offset = offsetof(Launch, vectorcall);
}

}  // namespace

namespace {

PyMethodDef launch_functions[] = {
    {"cuda_load", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(cuda_load)),
     METH_FASTCALL, "cuda_load(cubin, name, shared, device): see launch.cpp"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool jc::add_launch(PyObject* module) {
  set_up_launch_type();
  return jc::add_type(module, "CudaLaunch", &LaunchType) &&
         PyModule_AddFunctions(module, launch_functions) == 0;
}
