// The C++ extension's module (`_jc_cpp_ext`): torch's types read from torch._C, shared by
// every part (cpp_ext.h), and each part's types and functions added to the module.

#include "cpp_ext.h"

#ifndef JC_BUILT_FOR
#error "build with -DJC_BUILT_FOR=\"torch <version>, Python <version>\""
#endif

namespace jc {

PyObject* cdata_descr = nullptr;
descrgetfunc cdata_get = nullptr;
PyObject* dtype_type = nullptr;
PyObject* device_type = nullptr;
PyTypeObject* tensor_base_type = nullptr;
PyObject* checked_types = nullptr;

c10::TensorImpl* impl_of(PyObject* obj, PyObject* allowed, bool* other_tensor) {
  PyTypeObject* tp = Py_TYPE(obj);
  bool exact = false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(allowed); ++i) {
    exact = exact || reinterpret_cast<PyObject*>(tp) == PyTuple_GET_ITEM(allowed, i);
  }
  if (!exact) {
    *other_tensor = PyObject_TypeCheck(obj, tensor_base_type) != 0;
    return nullptr;
  }
  PyObject* address = cdata_get(cdata_descr, obj, reinterpret_cast<PyObject*>(tp));
  if (address == nullptr) {
    return nullptr;
  }
  auto* impl = static_cast<c10::TensorImpl*>(PyLong_AsVoidPtr(address));
  Py_DECREF(address);
  return impl;
}

bool add_type(PyObject* module, const char* name, PyTypeObject* type) {
  if (PyType_Ready(type) < 0) {
    return false;
  }
  Py_INCREF(type);
  if (PyModule_AddObject(module, name, reinterpret_cast<PyObject*>(type)) < 0) {
    Py_DECREF(type);
    return false;
  }
  return true;
}

}  // namespace jc

namespace {

// torch's dtype and device types and the `_cdata` getter come from torch._C, which must be
// imported (the build step and the guards both run with torch loaded).
bool read_torch_types() {
  using namespace jc;
  PyObject* torch_c = PyImport_ImportModule("torch._C");
  if (torch_c == nullptr) {
    return false;
  }
  PyObject* base = PyObject_GetAttrString(torch_c, "TensorBase");
  tensor_base_type = reinterpret_cast<PyTypeObject*>(base);  // this reference, kept for good
  dtype_type = PyObject_GetAttrString(torch_c, "dtype");
  device_type = PyObject_GetAttrString(torch_c, "device");
  Py_DECREF(torch_c);
  if (dtype_type == nullptr || device_type == nullptr) {
    Py_XDECREF(base);
    return false;
  }
  if (base == nullptr) {
    return false;
  }
  cdata_descr = PyObject_GetAttrString(base, "_cdata");  // the descriptor itself, from the type
  if (cdata_descr == nullptr) {
    return false;
  }
  cdata_get = Py_TYPE(cdata_descr)->tp_descr_get;
  if (cdata_get == nullptr) {
    PyErr_SetString(PyExc_ImportError, "torch._C.TensorBase._cdata is not a descriptor");
    return false;
  }
  return true;
}

// The tensor types checked in C++: a subclass may change what its attributes return.
bool read_checked_types() {
  PyObject* nn_parameter = PyImport_ImportModule("torch.nn.parameter");
  if (nn_parameter == nullptr) {
    return false;
  }
  PyObject* torch_mod = PyImport_ImportModule("torch");
  if (torch_mod == nullptr) {
    Py_DECREF(nn_parameter);
    return false;
  }
  PyObject* tensor_type = PyObject_GetAttrString(torch_mod, "Tensor");
  PyObject* parameter_type = PyObject_GetAttrString(nn_parameter, "Parameter");
  Py_DECREF(torch_mod);
  Py_DECREF(nn_parameter);
  if (tensor_type == nullptr || parameter_type == nullptr) {
    Py_XDECREF(tensor_type);
    Py_XDECREF(parameter_type);
    return false;
  }
  jc::checked_types = PyTuple_Pack(2, tensor_type, parameter_type);
  Py_DECREF(tensor_type);
  Py_DECREF(parameter_type);
  return jc::checked_types != nullptr;
}

PyModuleDef module_def = {PyModuleDef_HEAD_INIT};

}  // namespace

PyMODINIT_FUNC PyInit__jc_cpp_ext() {
  if (!read_torch_types() || !read_checked_types()) {
    return nullptr;
  }
  module_def.m_name = "_jc_cpp_ext";
  module_def.m_doc =
      "Tensor guards, CUDA graph output moves, optimizer gradient grouping and Triton kernel "
      "launches for jupyter-compile (compiler/runtime/cpp_ext.py).";
  module_def.m_size = -1;
  PyObject* module = PyModule_Create(&module_def);
  if (module == nullptr) {
    return nullptr;
  }
  if (PyModule_AddStringConstant(module, "BUILT_FOR", JC_BUILT_FOR) < 0 ||
      !jc::add_guards(module) || !jc::add_graph_outputs(module) ||
      !jc::add_grad_grouping(module) || !jc::add_launch(module)) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
