// Included once, by guards.cpp after frozen_reads.h (its `dict_version` and
// JC_DICT_VERSIONS are used here).
#pragma once

namespace {

// ---- ClassLookups: what attribute lookup on a module finds before nn.Module.__getattr__ ----
//
// A guard function reads `module.w` as `module._parameters['w']` (compiler/tracer/access.py)
// while eager's lookup would end there: `w` is in no class of the module's MRO and not in its
// `__dict__`, and `__getattr__`, `__getattribute__`, `__getitem__`, ... are what they were.
// `ClassLookups(type, absent, present, instance)(obj)` checks that for one object: its exact
// type, each name of `absent` found on no class of the MRO, each (name, value) of `present`
// found as that same object, and no name of `instance` in the object's `__dict__`. The class
// lookups are redone only when the type's version tag (renewed by CPython on any change to
// the type or a base) differs from the one they last held under: a call usually costs a type
// and a tag comparison, and the `__dict__` lookups only when the dict changed since they
// last passed (where this Python has dict versions).

struct Lookups {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* type;      // the exact type
  PyObject* absent;    // tuple of str
  PyObject* present;   // tuple of (str, value)
  PyObject* instance;  // tuple of str
  unsigned int tag;    // the type's version tag the lookups last held under (0: none yet)
  PyObject* dict;      // the __dict__ (borrowed, compared only) the names were last absent from
  uint64_t version;    // ... and its version then (JC_DICT_VERSIONS; frozen_reads.h)
};

bool lookups_hold(Lookups* l, PyTypeObject* tp) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(l->absent); ++i) {
    if (_PyType_Lookup(tp, PyTuple_GET_ITEM(l->absent, i)) != nullptr) {
      return false;
    }
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(l->present); ++i) {
    PyObject* pair = PyTuple_GET_ITEM(l->present, i);
    if (_PyType_Lookup(tp, PyTuple_GET_ITEM(pair, 0)) != PyTuple_GET_ITEM(pair, 1)) {
      return false;
    }
  }
  return true;
}

PyObject* lookups_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* l = reinterpret_cast<Lookups*>(self);
  if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0)) {
    PyErr_SetString(PyExc_TypeError, "ClassLookups takes one object");
    return nullptr;
  }
  PyObject* obj = args[0];
  PyTypeObject* tp = Py_TYPE(obj);
  if (reinterpret_cast<PyObject*>(tp) != l->type) {
    Py_RETURN_FALSE;
  }
  if (l->tag == 0 || tp->tp_version_tag != l->tag) {
    if (!lookups_hold(l, tp)) {
      Py_RETURN_FALSE;
    }
    // the lookups above assign a tag when the type can have one; 0 rechecks every call
    l->tag = tp->tp_version_tag;
  }
  if (PyTuple_GET_SIZE(l->instance) == 0) {
    Py_RETURN_TRUE;
  }
  PyObject** dictptr = _PyObject_GetDictPtr(obj);  // materializes an inline __dict__
  if (dictptr == nullptr || *dictptr == nullptr) {
    if (PyErr_Occurred()) {
      return nullptr;
    }
    Py_RETURN_TRUE;
  }
#if JC_DICT_VERSIONS
  // the same dict unchanged since the names were last absent: skip the lookups (a dict's
  // version is unique among all dicts' versions, so a new dict at the old address differs)
  if (*dictptr == l->dict && dict_version(*dictptr) == l->version) {
    Py_RETURN_TRUE;
  }
#endif
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(l->instance); ++i) {
    int found = PyDict_Contains(*dictptr, PyTuple_GET_ITEM(l->instance, i));
    if (found != 0) {
      return found < 0 ? nullptr : Py_NewRef(Py_False);
    }
  }
#if JC_DICT_VERSIONS
  l->dict = *dictptr;
  l->version = dict_version(*dictptr);
#endif
  Py_RETURN_TRUE;
}

bool all_str(PyObject* names) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); ++i) {
    if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(names, i))) {
      return false;
    }
  }
  return true;
}

PyObject* lookups_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *cls, *absent, *present, *instance;
  static const char* names[] = {"type", "absent", "present", "instance", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O!O!", const_cast<char**>(names),
                                   &PyType_Type, &cls, &PyTuple_Type, &absent, &PyTuple_Type,
                                   &present, &PyTuple_Type, &instance)) {
    return nullptr;
  }
  bool ok = all_str(absent) && all_str(instance);
  for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(present); ++i) {
    PyObject* pair = PyTuple_GET_ITEM(present, i);
    ok = PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 &&
         PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 0));
  }
  if (!ok) {
    PyErr_SetString(PyExc_TypeError,
                    "ClassLookups(type, absent: names, present: (name, value) pairs, "
                    "instance: names)");
    return nullptr;
  }
  auto* l = reinterpret_cast<Lookups*>(type->tp_alloc(type, 0));
  if (l == nullptr) {
    return nullptr;
  }
  l->vectorcall = lookups_call;
  l->type = Py_NewRef(cls);
  l->absent = Py_NewRef(absent);
  l->present = Py_NewRef(present);
  l->instance = Py_NewRef(instance);
  l->tag = 0;
  l->dict = nullptr;
  l->version = 0;
  return reinterpret_cast<PyObject*>(l);
}

int lookups_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* l = reinterpret_cast<Lookups*>(self);
  Py_VISIT(l->type);
  Py_VISIT(l->absent);
  Py_VISIT(l->present);
  Py_VISIT(l->instance);
  return 0;
}

int lookups_clear(PyObject* self) {
  auto* l = reinterpret_cast<Lookups*>(self);
  Py_CLEAR(l->type);
  Py_CLEAR(l->absent);
  Py_CLEAR(l->present);
  Py_CLEAR(l->instance);
  return 0;
}

void lookups_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  lookups_clear(self);
  Py_TYPE(self)->tp_free(self);
}

PyObject* lookups_repr(PyObject* self) {
  auto* l = reinterpret_cast<Lookups*>(self);
  return PyUnicode_FromFormat("<ClassLookups of %s: absent %R, not in __dict__ %R>",
                              reinterpret_cast<PyTypeObject*>(l->type)->tp_name, l->absent,
                              l->instance);
}

PyMemberDef lookups_members[] = {
    {"type", T_OBJECT, offsetof(Lookups, type), READONLY, "the exact type"},
    {"absent", T_OBJECT, offsetof(Lookups, absent), READONLY, "names no class defines"},
    {"present", T_OBJECT, offsetof(Lookups, present), READONLY, "(name, value) class lookups"},
    {"instance", T_OBJECT, offsetof(Lookups, instance), READONLY, "names not in __dict__"},
    {nullptr, 0, 0, 0, nullptr},
};

PyTypeObject LookupsType = {PyVarObject_HEAD_INIT(nullptr, 0)};

}  // namespace
