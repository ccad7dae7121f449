// Declarations shared by the translation units of the C++ extension `_jc_cpp_ext`
// (compiler/runtime/cpp_ext.py builds them into one module):
//
//   module.cpp         the module: torch's types read from torch._C, the TensorImpl reader
//   guards.cpp         TensorChecker, with FrozenReads (frozen_reads.h), ClassLookups
//                      (class_lookups.h) and AliasGuard (alias_guard.h)
//   graph_outputs.cpp  the storage moves of gradients handed out in a CUDA graph's memory
//   grad_grouping.cpp  group_grads: a compiled optimizer step's per-parameter checks
//   launch.cpp         loading and launching compiled Triton kernels through the CUDA driver
//
// Only small torch headers are included (TensorImpl, the dtype and device objects), not
// torch/extension.h or python_variable.h (pybind11 and all of ATen: 30 s to compile).
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace c10 {
struct TensorImpl;
}

namespace jc {

// The `_cdata` getter of torch._C.TensorBase and its descriptor's __get__.
extern PyObject* cdata_descr;
extern descrgetfunc cdata_get;
// torch.dtype and torch.device, read from torch._C rather than linked against
// libtorch_python (THPDtypeType, THPDeviceType): the extension links only to c10.
extern PyObject* dtype_type;
extern PyObject* device_type;
extern PyTypeObject* tensor_base_type;  // torch._C.TensorBase
extern PyObject* checked_types;  // (torch.Tensor, nn.Parameter)

// The TensorImpl of an exact torch.Tensor or nn.Parameter; nullptr with no error for any
// other object (`*other_tensor` set for a tensor of another type), nullptr with an error.
c10::TensorImpl* impl_of(PyObject* obj, PyObject* allowed, bool* other_tensor);

// `type`, readied, added to `module` as `name`; false with a Python error set.
bool add_type(PyObject* module, const char* name, PyTypeObject* type);

// Each part adds its types, functions and constants to the module; false with an error set.
bool add_guards(PyObject* module);
bool add_graph_outputs(PyObject* module);
bool add_grad_grouping(PyObject* module);
bool add_launch(PyObject* module);

}  // namespace jc
