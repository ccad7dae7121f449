// Included once, by guards.cpp (the state of cpp_ext.h is used here).
#pragma once

namespace {

// ---- AliasGuard: do a graph's mutated inputs share memory with another input? ------------
//
// compiler/runtime/aliasing.py runs a graph that writes to its inputs eagerly when a written
// input shares its storage with another input. An optimizer step has ~300 inputs whose
// gradients land at new addresses every step, so the check runs in full each call: in Python
// two method calls per input (`untyped_storage().data_ptr()`). `AliasGuard(mutated)(*args)`
// answers the same question in one call: True when no mutated input shares its storage with
// another tensor input (or every input starts where it did on the last call found so),
// False when one does, None when an input is a tensor subclass or has no storage to read
// (aliasing.py's Python check decides then).

struct Alias {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* mutated;  // tuple of the written inputs' positions
  std::vector<Py_ssize_t>* written;
  std::vector<uintptr_t>* safe;  // each input's data_ptr on the last call found safe
  bool has_safe;
};

PyObject* alias_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* a = reinterpret_cast<Alias*>(self);
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0) {
    PyErr_SetString(PyExc_TypeError, "AliasGuard takes positional arguments only");
    return nullptr;
  }
  PyObject* allowed = checked_types;
  std::vector<uintptr_t> data(static_cast<size_t>(n), 0);
  std::vector<uintptr_t> storage(static_cast<size_t>(n), 0);  // 0: no storage to compare
  try {
    for (Py_ssize_t i = 0; i < n; ++i) {
      bool other_tensor = false;
      c10::TensorImpl* impl = impl_of(args[i], allowed, &other_tensor);
      if (impl == nullptr) {
        if (PyErr_Occurred()) {
          return nullptr;
        }
        if (other_tensor) {
          Py_RETURN_NONE;
        }
        continue;  // not a tensor: it shares no memory
      }
      data[i] = reinterpret_cast<uintptr_t>(impl->data());
      if (impl->numel() != 0) {
        storage[i] = reinterpret_cast<uintptr_t>(impl->storage().data());
      }
    }
  } catch (...) {
    Py_RETURN_NONE;  // a tensor without storage (as Python's data_ptr() raises)
  }
  if (a->has_safe && data == *a->safe) {
    Py_RETURN_TRUE;
  }
  std::vector<std::pair<uintptr_t, Py_ssize_t>> sorted;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (storage[i] != 0) {
      sorted.emplace_back(storage[i], i);
    }
  }
  std::sort(sorted.begin(), sorted.end());
  std::vector<bool> shared(static_cast<size_t>(n), false);
  for (size_t k = 1; k < sorted.size(); ++k) {
    if (sorted[k].first == sorted[k - 1].first) {
      shared[sorted[k].second] = shared[sorted[k - 1].second] = true;
    }
  }
  for (Py_ssize_t i : *a->written) {
    if (i < n && shared[i]) {
      Py_RETURN_FALSE;
    }
  }
  *a->safe = std::move(data);
  a->has_safe = true;
  Py_RETURN_TRUE;
}

PyObject* alias_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject* mutated;
  static const char* names[] = {"mutated", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!", const_cast<char**>(names), &PyTuple_Type,
                                   &mutated)) {
    return nullptr;
  }
  auto* a = reinterpret_cast<Alias*>(type->tp_alloc(type, 0));
  if (a == nullptr) {
    return nullptr;
  }
  a->vectorcall = alias_call;
  Py_INCREF(mutated);
  a->mutated = mutated;
  a->written = new std::vector<Py_ssize_t>();
  a->safe = new std::vector<uintptr_t>();
  a->has_safe = false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mutated); ++i) {
    Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(mutated, i));
    if (pos < 0) {
      if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "a mutated position is >= 0");
      }
      Py_DECREF(a);
      return nullptr;
    }
    a->written->push_back(pos);
  }
  return reinterpret_cast<PyObject*>(a);
}

void alias_dealloc(PyObject* self) {
  auto* a = reinterpret_cast<Alias*>(self);
  delete a->written;
  delete a->safe;
  Py_XDECREF(a->mutated);
  Py_TYPE(self)->tp_free(self);
}

PyMemberDef alias_members[] = {
    {"mutated", T_OBJECT, offsetof(Alias, mutated), READONLY, "the written inputs' positions"},
    {nullptr, 0, 0, 0, nullptr},
};

PyTypeObject AliasType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// same_addresses(inputs, positions, addresses): whether `inputs[positions[k]].data_ptr()` is
// `addresses[k]` for every k (a CUDA graph's replay reads parameters where it captured them:
// compiler/runtime/cudagraphs.py checks ~100 of them before each replay); None where such an
// input is not an exact torch.Tensor or nn.Parameter (cudagraphs.py asks Python then).
PyObject* same_addresses(PyObject* /*module*/, PyObject* const* args, Py_ssize_t n) {
  if (n != 3 || !(PyList_Check(args[0]) || PyTuple_Check(args[0])) || !PyTuple_Check(args[1]) ||
      !PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[1]) != PyTuple_GET_SIZE(args[2])) {
    PyErr_SetString(PyExc_TypeError,
                    "same_addresses(inputs, positions, addresses): a list or tuple and two "
                    "tuples of one length");
    return nullptr;
  }
  Py_ssize_t n_inputs = PySequence_Fast_GET_SIZE(args[0]);
  PyObject** inputs = PySequence_Fast_ITEMS(args[0]);
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(args[1]); ++k) {
    Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[1], k));
    if (pos == -1 && PyErr_Occurred()) {
      return nullptr;
    }
    if (pos < 0 || pos >= n_inputs) {
      PyErr_SetString(PyExc_IndexError, "same_addresses: a position is out of range");
      return nullptr;
    }
    void* expected = PyLong_AsVoidPtr(PyTuple_GET_ITEM(args[2], k));
    if (expected == nullptr && PyErr_Occurred()) {
      return nullptr;
    }
    bool other_tensor = false;
    c10::TensorImpl* impl = impl_of(inputs[pos], checked_types, &other_tensor);
    if (impl == nullptr) {
      if (PyErr_Occurred()) {
        return nullptr;
      }
      Py_RETURN_NONE;
    }
    try {
      if (impl->data() != expected) {
        Py_RETURN_FALSE;
      }
    } catch (...) {
      Py_RETURN_NONE;
    }
  }
  Py_RETURN_TRUE;
}

}  // namespace
