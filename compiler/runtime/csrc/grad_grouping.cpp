// The optimizer's gradient grouping: a compiled step's per-parameter checks in one call
// (compiler/optim/step.py); a part of the C++ extension (cpp_ext.h).

#include "cpp_ext.h"

#include <c10/core/TensorImpl.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>

using namespace jc;

namespace {

// ---- group_grads: a compiled optimizer step's per-parameter checks, in one call ---------
//
// compiler/optim/step.py (`_reuse`) hands the last step's tensor lists to the next step when
// nothing they came from changed. Per parameter it reads `p.grad` and checks the gradient's
// and the parameter's dtype, layout and device, then that each state tensor is still the one
// listed: in Python ~10 attribute reads per parameter (a torch.device built for each device
// read), most of that function's time for densenet121's 364 parameters. This answers the
// same checks in one call:
//
//   group_grads(params, dtypes, device, state_dicts, state_lists)
//     params       the group's params (a list or tuple), already found identical to the plan's
//     dtypes       per parameter: the torch.dtype it and its gradient had, or None where it
//                  had no gradient
//     device       the torch.device every parameter and gradient is on
//     state_dicts  opt.state[p] of each parameter with a gradient, in order
//     state_lists  ((key, tensors), ...): each listed state tensor is `state_dicts[k][key]`
//
// It returns the gradients (a new list) where every check passes, None where one fails (as
// `_reuse` returns None), and NotImplemented where only Python can answer: a parameter or
// gradient that is not an exact torch.Tensor or nn.Parameter (a subclass's attributes may
// run Python), a state entry that is not a dict, or a read that raised in C++ (Python then
// raises the same error). The caller calls it only without a torch function mode, so that
// every `p.grad` read here is torch's plain getter, which the Python checks may repeat.
// The gradients' and parameters' reads are those of torch's getters: `t.dtype`, `t.layout`
// and `t.device` return TensorImpl's dtype(), layout() and device().

PyObject* grad_name = nullptr;  // "grad", interned at the first call

// 1: `obj` has this dtype, a strided layout and this device; 0: it does not; -1: ask Python
// (another type, or a read that raised); -2: a Python error is set.
int fits(PyObject* obj, c10::ScalarType dtype, c10::Device device) {
  bool other_tensor = false;
  c10::TensorImpl* impl = impl_of(obj, checked_types, &other_tensor);
  if (impl == nullptr) {
    return PyErr_Occurred() ? -2 : -1;
  }
  try {
    if (impl->dtype().toScalarType() != dtype || impl->layout() != c10::kStrided ||
        impl->device() != device) {
      return 0;
    }
  } catch (...) {
    return -1;
  }
  return 1;
}

bool exact_tensor_type(PyObject* obj) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(checked_types); ++i) {
    if (reinterpret_cast<PyObject*>(Py_TYPE(obj)) == PyTuple_GET_ITEM(checked_types, i)) {
      return true;
    }
  }
  return false;
}

// 1: each listed state tensor is the one in its dict; 0: one is not; -1: ask Python.
int same_state(PyObject* state_dicts, PyObject* state_lists) {
  Py_ssize_t n_dicts = PyList_GET_SIZE(state_dicts);
  for (Py_ssize_t s = 0; s < PyTuple_GET_SIZE(state_lists); ++s) {
    PyObject* pair = PyTuple_GET_ITEM(state_lists, s);
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
        !PyList_Check(PyTuple_GET_ITEM(pair, 1))) {
      return -1;
    }
    PyObject* key = PyTuple_GET_ITEM(pair, 0);
    PyObject* tensors = PyTuple_GET_ITEM(pair, 1);
    // as zip: the shorter of the two decides
    Py_ssize_t n = std::min(n_dicts, PyList_GET_SIZE(tensors));
    for (Py_ssize_t k = 0; k < n; ++k) {
      PyObject* state = PyList_GET_ITEM(state_dicts, k);
      if (!PyDict_Check(state)) {
        return -1;  // dict.get raises there
      }
      PyObject* value = PyDict_GetItemWithError(state, key);  // borrowed
      if (value == nullptr && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
      }
      // dict.get's None for a missing key is never a listed tensor
      if (value != PyList_GET_ITEM(tensors, k)) {
        return 0;
      }
    }
  }
  return 1;
}

PyObject* group_grads(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5 || !(PyList_Check(args[0]) || PyTuple_Check(args[0])) ||
      !PyTuple_Check(args[1]) || reinterpret_cast<PyObject*>(Py_TYPE(args[2])) != device_type ||
      !PyList_Check(args[3]) || !PyTuple_Check(args[4])) {
    PyErr_SetString(PyExc_TypeError,
                    "group_grads(params, dtypes, device, state_dicts, state_lists): a list or "
                    "tuple, a tuple, a torch.device, a list and a tuple");
    return nullptr;
  }
  if (grad_name == nullptr) {
    grad_name = PyUnicode_InternFromString("grad");
    if (grad_name == nullptr) {
      return nullptr;
    }
  }
  PyObject* params = args[0];
  PyObject* dtypes = args[1];
  c10::Device device = reinterpret_cast<THPDevice*>(args[2])->device;
  Py_ssize_t n = std::min(PySequence_Fast_GET_SIZE(params), PyTuple_GET_SIZE(dtypes));
  PyObject** items = PySequence_Fast_ITEMS(params);
  PyObject* grads = PyList_New(0);
  if (grads == nullptr) {
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* p = items[i];
    if (!exact_tensor_type(p)) {
      Py_DECREF(grads);
      Py_RETURN_NOTIMPLEMENTED;  // its `.grad` may run Python: read it there, once
    }
    PyObject* grad = PyObject_GetAttr(p, grad_name);
    if (grad == nullptr) {
      Py_DECREF(grads);
      return nullptr;
    }
    PyObject* dtype = PyTuple_GET_ITEM(dtypes, i);
    int ok;
    if (grad == Py_None || dtype == Py_None) {
      ok = grad == Py_None && dtype == Py_None ? 2 : 0;  // 2: no gradient, as planned
    } else if (reinterpret_cast<PyObject*>(Py_TYPE(dtype)) != dtype_type) {
      ok = -1;
    } else {
      c10::ScalarType scalar = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
      ok = fits(grad, scalar, device);
      if (ok == 1) {
        ok = fits(p, scalar, device);
      }
    }
    if (ok == 1) {
      ok = PyList_Append(grads, grad) == 0 ? 1 : -2;
    }
    Py_DECREF(grad);
    if (ok == 2 || ok == 1) {
      continue;
    }
    Py_DECREF(grads);
    if (ok == 0) {
      Py_RETURN_NONE;
    }
    if (ok == -1) {
      Py_RETURN_NOTIMPLEMENTED;
    }
    return nullptr;
  }
  if (PyList_GET_SIZE(grads) == 0) {
    return grads;  // a group without gradients: its state is not checked (`_reuse` skips it)
  }
  int same = same_state(args[3], args[4]);
  if (same == 1) {
    return grads;
  }
  Py_DECREF(grads);
  if (same == 0) {
    Py_RETURN_NONE;
  }
  Py_RETURN_NOTIMPLEMENTED;
}

}  // namespace

namespace {

PyMethodDef grad_grouping_functions[] = {
    {"group_grads", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(group_grads)),
     METH_FASTCALL,
     "group_grads(params, dtypes, device, state_dicts, state_lists): see grad_grouping.cpp"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool jc::add_grad_grouping(PyObject* module) {
  return PyModule_AddFunctions(module, grad_grouping_functions) == 0;
}
