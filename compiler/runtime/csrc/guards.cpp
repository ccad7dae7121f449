// Tensor guards in C++: one call checks the metadata of many tensors.
//
// A guard function (compiler/tracer/guards.py) checks each tensor input's exact Python type,
// dtype, device, sizes, strides and requires_grad. In Python each is an attribute read
// through torch's getters (50-130 ns); a resnet's ~100 parameters make that most of a call's
// guard time. A `TensorChecker` is built once per guard function with the expected metadata
// and called with the tensors as positional arguments; it answers True when every tensor
// matches, as the Python checks it replaces would.
//
// The TensorImpl is reached through `Tensor._cdata`, the getter torch has long had that
// returns the TensorImpl's address, called through its descriptor (no attribute lookup).
// The checker accepts only torch.Tensor and nn.Parameter (see `TensorChecker.__init__`
// below): a subclass can change what its attributes return, so it is checked in Python.
//
// The other guards, included here: `FrozenReads` (frozen_reads.h: a guard call skips
// re-reading module attributes no write has touched), `ClassLookups` (class_lookups.h:
// nothing hides a module's parameters, buffers and children read from its tables) and
// `AliasGuard` (alias_guard.h: do a graph's mutated inputs share memory with another input).

#include "cpp_ext.h"

#include <structmember.h>

#include <c10/core/TensorImpl.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

using namespace jc;

namespace {

struct Expected {
  PyTypeObject* type;  // exact type; kept alive by the checker's `specs` tuple
  c10::ScalarType dtype;
  bool cpu;  // `t.is_cpu`, as the Python guard tests a cpu tensor (any index)
  c10::Device device{c10::DeviceType::CPU};  // otherwise `t.device == device`
  bool has_sizes;  // false for a tensor with symbolic sizes (checked in Python)
  std::vector<int64_t> sizes;
  bool has_strides;  // false for symbolic sizes and non-strided layouts
  std::vector<int64_t> strides;
  bool requires_grad;
};

struct Checker {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* specs;  // the tuple the checker was built from (shown by repr, keeps types alive)
  std::vector<Expected>* expected;
};

// 1: the tensor matches; 0: it does not; -1: a Python error is set.
int check_one(const Expected& e, PyObject* obj) {
  if (Py_TYPE(obj) != e.type) {
    return 0;
  }
  PyObject* address = cdata_get(cdata_descr, obj, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
  if (address == nullptr) {
    return -1;
  }
  auto* impl = static_cast<c10::TensorImpl*>(PyLong_AsVoidPtr(address));
  Py_DECREF(address);
  if (impl == nullptr) {
    return PyErr_Occurred() ? -1 : 0;
  }
  // A tensor whose sizes, strides or device cannot be read (a sparse tensor has no strides,
  // a nested one no sizes) raises in Python too, where the guard function returns False.
  try {
    if (impl->dtype().toScalarType() != e.dtype) {
      return 0;
    }
    if (e.cpu ? !impl->is_cpu() : impl->device() != e.device) {
      return 0;
    }
    if (e.has_sizes) {
      c10::IntArrayRef sizes = impl->sizes();
      if (!sizes.equals(e.sizes)) {
        return 0;
      }
    }
    if (e.has_strides) {
      c10::IntArrayRef strides = impl->strides();
      if (!strides.equals(e.strides)) {
        return 0;
      }
    }
    if (impl->requires_grad() != e.requires_grad) {
      return 0;
    }
  } catch (...) {
    return 0;
  }
  return 1;
}

PyObject* checker_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* checker = reinterpret_cast<Checker*>(self);
  const std::vector<Expected>& expected = *checker->expected;
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if ((kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0) ||
      n != static_cast<Py_ssize_t>(expected.size())) {
    PyErr_Format(PyExc_TypeError, "TensorChecker takes %zd positional arguments, got %zd",
                 static_cast<Py_ssize_t>(expected.size()), n);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    int ok = check_one(expected[i], args[i]);
    if (ok == 0) {
      Py_RETURN_FALSE;
    }
    if (ok < 0) {
      // As the guard function's `except Exception`: an error means the guard fails; only
      // KeyboardInterrupt and its kind go through.
      if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        return nullptr;
      }
      PyErr_Clear();
      Py_RETURN_FALSE;
    }
  }
  Py_RETURN_TRUE;
}

bool read_ints(PyObject* seq, std::vector<int64_t>& out) {
  PyObject* fast = PySequence_Fast(seq, "sizes and strides are sequences of ints");
  if (fast == nullptr) {
    return false;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  for (Py_ssize_t i = 0; i < n; ++i) {
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return false;
    }
    out.push_back(static_cast<int64_t>(v));
  }
  Py_DECREF(fast);
  return true;
}

// One spec: (type, dtype, device, sizes or None, strides or None, requires_grad).
bool read_spec(PyObject* spec, PyObject* allowed, Expected& e) {
  PyObject *type, *dtype, *device, *sizes, *strides;
  int requires_grad;
  if (!PyTuple_Check(spec) ||
      !PyArg_ParseTuple(spec, "OOOOOp", &type, &dtype, &device, &sizes, &strides, &requires_grad)) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_TypeError, "a spec is a tuple");
    }
    return false;
  }
  int ok = PySequence_Contains(allowed, type);
  if (ok <= 0) {
    if (ok == 0) {
      PyErr_SetString(PyExc_TypeError, "TensorChecker checks torch.Tensor and nn.Parameter only");
    }
    return false;
  }
  if (reinterpret_cast<PyObject*>(Py_TYPE(dtype)) != dtype_type ||
      reinterpret_cast<PyObject*>(Py_TYPE(device)) != device_type) {
    PyErr_SetString(PyExc_TypeError, "a spec's dtype and device are torch.dtype and torch.device");
    return false;
  }
  e.type = reinterpret_cast<PyTypeObject*>(type);
  e.dtype = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
  e.device = reinterpret_cast<THPDevice*>(device)->device;
  e.cpu = e.device.type() == c10::DeviceType::CPU;
  e.has_sizes = sizes != Py_None;
  e.has_strides = strides != Py_None;
  e.requires_grad = requires_grad != 0;
  return (!e.has_sizes || read_ints(sizes, e.sizes)) &&
         (!e.has_strides || read_ints(strides, e.strides));
}

PyObject* checker_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *specs, *allowed;
  static const char* names[] = {"specs", "allowed_types", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!", const_cast<char**>(names),
                                   &PyTuple_Type, &specs, &PyTuple_Type, &allowed)) {
    return nullptr;
  }
  auto expected = new std::vector<Expected>(PyTuple_GET_SIZE(specs));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(specs); ++i) {
    if (!read_spec(PyTuple_GET_ITEM(specs, i), allowed, (*expected)[i])) {
      delete expected;
      return nullptr;
    }
  }
  auto* self = reinterpret_cast<Checker*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    delete expected;
    return nullptr;
  }
  self->vectorcall = checker_call;
  Py_INCREF(specs);
  self->specs = specs;
  self->expected = expected;
  return reinterpret_cast<PyObject*>(self);
}

void checker_dealloc(PyObject* self) {
  auto* checker = reinterpret_cast<Checker*>(self);
  delete checker->expected;
  Py_XDECREF(checker->specs);
  Py_TYPE(self)->tp_free(self);
}

PyObject* checker_repr(PyObject* self) {
  return PyUnicode_FromFormat("<TensorChecker of %zd tensors>",
                              PyTuple_GET_SIZE(reinterpret_cast<Checker*>(self)->specs));
}

PyMemberDef checker_members[] = {
    {"specs", T_OBJECT, offsetof(Checker, specs), READONLY, "the expected metadata, per tensor"},
    {nullptr, 0, 0, 0, nullptr},
};

PyTypeObject CheckerType = {PyVarObject_HEAD_INIT(nullptr, 0)};

}  // namespace
#include "alias_guard.h"
#include "frozen_reads.h"
#include "class_lookups.h"

namespace {

PyMethodDef guard_functions[] = {
    {"same_addresses", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(same_addresses)),
     METH_FASTCALL, "same_addresses(inputs, positions, addresses): see alias_guard.h"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool jc::add_guards(PyObject* module) {
  CheckerType.tp_name = "_jc_cpp_ext.TensorChecker";
  CheckerType.tp_doc =
      "TensorChecker(specs, allowed_types): called with one tensor per spec, True when each "
      "has the spec's exact type, dtype, device, sizes, strides and requires_grad.";
  CheckerType.tp_basicsize = sizeof(Checker);
  CheckerType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  CheckerType.tp_vectorcall_offset = offsetof(Checker, vectorcall);
  CheckerType.tp_call = PyVectorcall_Call;
  CheckerType.tp_new = checker_new;
  CheckerType.tp_dealloc = checker_dealloc;
  CheckerType.tp_repr = checker_repr;
  CheckerType.tp_members = checker_members;

  getattribute_name = PyUnicode_InternFromString("__getattribute__");
  if (getattribute_name == nullptr) {
    return false;
  }
  FrozenType.tp_name = "_jc_cpp_ext.FrozenReads";
  FrozenType.tp_doc =
      "FrozenReads(n_roots, reads, types, selection): the values of attribute and dict reads "
      "from pinned objects, answered while no dict or class they went through changed.";
  FrozenType.tp_basicsize = sizeof(Frozen);
  FrozenType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC;
  FrozenType.tp_vectorcall_offset = offsetof(Frozen, vectorcall);
  FrozenType.tp_call = PyVectorcall_Call;
  FrozenType.tp_new = frozen_new;
  FrozenType.tp_dealloc = frozen_dealloc;
  FrozenType.tp_traverse = frozen_traverse;
  FrozenType.tp_clear = frozen_clear;
  FrozenType.tp_repr = frozen_repr;
  FrozenType.tp_methods = frozen_methods;
  FrozenType.tp_members = frozen_members;

  LookupsType.tp_name = "_jc_cpp_ext.ClassLookups";
  LookupsType.tp_doc =
      "ClassLookups(type, absent, present, instance)(obj): obj's exact type is `type`, whose "
      "MRO defines no name of `absent` and each (name, value) of `present` as that value, "
      "and no name of `instance` is in obj's __dict__.";
  LookupsType.tp_basicsize = sizeof(Lookups);
  LookupsType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC;
  LookupsType.tp_vectorcall_offset = offsetof(Lookups, vectorcall);
  LookupsType.tp_call = PyVectorcall_Call;
  LookupsType.tp_new = lookups_new;
  LookupsType.tp_dealloc = lookups_dealloc;
  LookupsType.tp_traverse = lookups_traverse;
  LookupsType.tp_clear = lookups_clear;
  LookupsType.tp_repr = lookups_repr;
  LookupsType.tp_members = lookups_members;

  AliasType.tp_name = "_jc_cpp_ext.AliasGuard";
  AliasType.tp_doc =
      "AliasGuard(mutated)(*inputs): True when no mutated input shares its storage with "
      "another input, False when one does, None when it cannot tell (a tensor subclass).";
  AliasType.tp_basicsize = sizeof(Alias);
  AliasType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  AliasType.tp_vectorcall_offset = offsetof(Alias, vectorcall);
  AliasType.tp_call = PyVectorcall_Call;
  AliasType.tp_new = alias_new;
  AliasType.tp_dealloc = alias_dealloc;
  AliasType.tp_members = alias_members;

  return add_type(module, "TensorChecker", &CheckerType) &&
         add_type(module, "FrozenReads", &FrozenType) &&
         PyModule_AddIntConstant(module, "DICT_VERSIONS", JC_DICT_VERSIONS) == 0 &&
         add_type(module, "ClassLookups", &LookupsType) &&
         add_type(module, "AliasGuard", &AliasType) &&
         PyModule_AddFunctions(module, guard_functions) == 0;
}
