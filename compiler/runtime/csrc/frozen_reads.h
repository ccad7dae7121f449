// Included once, by guards.cpp (the state of cpp_ext.h is used here).
#pragma once

namespace {

// ---- FrozenReads: skip re-reading module attributes that cannot have changed -------------
//
// Most of a module's guard function reads attributes and table entries of modules pinned by
// identity (`L_self is ___obj4`, then `L_self._modules['conv1']`, `.padding_mode`, ...) and
// checks values that are the same objects as long as those reads are. A read `base.name` is
// determined by base's type (its attribute lookup, pinned by the type's version tag, which
// CPython renews whenever the type or a base class changes) and base's `__dict__` (pinned by
// the dict's identity and its version tag, which changes on every write to the dict); a read
// `table[key]` of an exact dict by that dict's version. `FrozenReads.remember(*values)`,
// called at the end of a guard call that passed in full, records those for every read and
// keeps the values; a later call (`FrozenReads()`) answers the values some checks still need
// when nothing changed, else None (the guard function then runs in full).
//
// Dict version tags exist in CPython 3.11 and 3.12 (deprecated there, removed later); on
// another Python `remember` refuses and every call runs in full. 3.13 still has the field,
// but a write to an object's inline __dict__ values leaves it unchanged: not used there.

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
#define JC_DICT_VERSIONS 1
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
inline uint64_t dict_version(PyObject* d) {
  return reinterpret_cast<PyDictObject*>(d)->ma_version_tag;
}
#pragma GCC diagnostic pop
#else
#define JC_DICT_VERSIONS 0
#endif

PyObject* getattribute_name = nullptr;  // interned "__getattribute__"

struct Read {
  Py_ssize_t base;  // the slot read from: a root (pinned by the caller) or an earlier read
  bool attr;        // base.key, else base[key] on an exact dict
  PyObject* key;    // borrowed from the spec tuple
};

struct Watch {
  PyObject* obj;        // an attribute read's base, or an item read's dict
  PyTypeObject* type;   // the base's type (attribute reads)
  unsigned int tag;     // the type's version tag then
  PyObject* dict;       // the base's __dict__ then (nullptr: it has none)
  uint64_t version;     // the version of `dict` (attribute reads) or `obj` (item reads)
  bool attr;
};

struct Frozen {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* spec;     // (n_roots, reads, types, selection) as given
  Py_ssize_t n_roots;
  std::vector<Read>* reads;
  std::vector<std::pair<Py_ssize_t, PyTypeObject*>>* types;  // slot, exact type (per call)
  std::vector<Py_ssize_t>* selection;  // the slots a call answers
  // What was remembered: watches and type checks point into `held`, a list that owns them.
  std::vector<Watch>* watches;
  std::vector<std::pair<PyObject*, PyTypeObject*>>* typed;
  PyObject* held;     // list, or nullptr when nothing is remembered
  PyObject* values;   // tuple of the selected values, or nullptr
  int churn;          // states remembered in a row that no call has used
  int skip;           // calls of `remember` to let pass before remembering again
};

void frozen_forget(Frozen* f) {
  f->watches->clear();
  f->typed->clear();
  Py_CLEAR(f->held);
  Py_CLEAR(f->values);
}

// Attribute lookup on instances of `tp` is object's generic one (with, for a class that
// defines `__getattr__`, that method only as a fallback), or a plain module's.
bool generic_lookup(PyTypeObject* tp) {
  if (tp == &PyModule_Type) {
    return true;
  }
  PyObject* ga = _PyType_Lookup(tp, getattribute_name);
  return ga != nullptr && Py_IS_TYPE(ga, &PyWrapperDescr_Type) &&
         reinterpret_cast<PyWrapperDescrObject*>(ga)->d_wrapped ==
             reinterpret_cast<void*>(PyObject_GenericGetAttr);
}

#if JC_DICT_VERSIONS
// Records the watch for reading `key` from `base` and checks that it gives `value`;
// false when the read is not one a watch can pin (or gave another value).
// `known`: the watch of an earlier read from the same base (its __dict__ is already held).
bool watch_attr(PyObject* base, PyObject* key, PyObject* value, const Watch* known, Watch& w,
                PyObject* held) {
  PyTypeObject* tp = Py_TYPE(base);
  if (!PyUnicode_CheckExact(key) || !generic_lookup(tp)) {
    return false;
  }
  PyObject* descr = _PyType_Lookup(tp, key);  // assigns the type a version tag when it can
  if (!PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG) || tp->tp_version_tag == 0) {
    return false;
  }
  if (descr != nullptr && Py_TYPE(descr)->tp_descr_set != nullptr) {
    return false;  // a data descriptor (property, slot) computes the value
  }
  PyObject* dict = known != nullptr ? known->dict : nullptr;
  if (known == nullptr && tp->tp_dictoffset != 0) {
    dict = PyObject_GenericGetDict(base, nullptr);  // materializes an inline __dict__
    if (dict == nullptr) {
      PyErr_Clear();
      return false;
    }
    int ok = PyList_Append(held, dict);
    Py_DECREF(dict);
    if (ok < 0) {
      PyErr_Clear();
      return false;
    }
  }
  PyObject* found = dict != nullptr ? PyDict_GetItemWithError(dict, key) : nullptr;
  if (found == nullptr) {
    if (PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    if (descr == nullptr || Py_TYPE(descr)->tp_descr_get != nullptr) {
      return false;  // from a method or `__getattr__`: not pinned by the dicts
    }
    found = descr;  // a plain class attribute
  }
  if (found != value || (known == nullptr && PyList_Append(held, base) < 0)) {
    PyErr_Clear();
    return false;
  }
  w = Watch{base, tp, tp->tp_version_tag, dict, dict != nullptr ? dict_version(dict) : 0, true};
  return true;
}

bool watch_item(PyObject* base, PyObject* key, PyObject* value, const Watch* known, Watch& w,
                PyObject* held) {
  if (!PyDict_CheckExact(base)) {
    return false;
  }
  PyObject* found = PyDict_GetItemWithError(base, key);
  if (found != value || (known == nullptr && PyList_Append(held, base) < 0)) {
    PyErr_Clear();
    return false;
  }
  w = Watch{base, nullptr, 0, nullptr, dict_version(base), false};
  return true;
}
#endif

bool watch_holds(const Watch& w) {
#if JC_DICT_VERSIONS
  if (!w.attr) {
    return dict_version(w.obj) == w.version;
  }
  if (Py_TYPE(w.obj) != w.type || w.type->tp_version_tag != w.tag) {
    return false;
  }
  if (w.dict == nullptr) {
    return true;  // the type has no __dict__ slot (a type pinned above)
  }
  PyObject** dictptr = _PyObject_GetDictPtr(w.obj);
  return dictptr != nullptr && *dictptr == w.dict && dict_version(w.dict) == w.version;
#else
  (void)w;
  return false;
#endif
}

// remember(*values): the roots then one value per read, as the guard function read them.
// Returns whether the reads are now watched.
PyObject* frozen_remember(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  auto* f = reinterpret_cast<Frozen*>(self);
  frozen_forget(f);
  const std::vector<Read>& reads = *f->reads;
  if (n != f->n_roots + static_cast<Py_ssize_t>(reads.size())) {
    PyErr_Format(PyExc_TypeError, "remember takes %zd values, got %zd",
                 f->n_roots + static_cast<Py_ssize_t>(reads.size()), n);
    return nullptr;
  }
  // A module written to before every call (an attribute set each step) would pay for
  // remembering on every call and never use it: after the third remembered state in a row
  // that no call used, remember again only after 2, 4, ... up to 64 calls.
  if (f->skip > 0) {
    --f->skip;
    Py_RETURN_FALSE;
  }
  if (++f->churn > 2) {
    f->skip = 1 << std::min(f->churn - 2, 6);
  }
#if JC_DICT_VERSIONS
  PyObject* held = PyList_New(0);
  if (held == nullptr) {
    return nullptr;
  }
  f->held = held;
  // a base is watched once per kind: its watch's position in `watches`
  std::unordered_map<PyObject*, size_t> attr_at, item_at;
  for (size_t i = 0; i < reads.size(); ++i) {
    const Read& r = reads[i];
    PyObject* base = args[r.base];
    PyObject* value = args[f->n_roots + static_cast<Py_ssize_t>(i)];
    std::unordered_map<PyObject*, size_t>& at = r.attr ? attr_at : item_at;
    auto seen = at.find(base);
    const Watch* known = seen != at.end() ? &(*f->watches)[seen->second] : nullptr;
    Watch w{};
    bool ok = r.attr ? watch_attr(base, r.key, value, known, w, held)
                     : watch_item(base, r.key, value, known, w, held);
    if (!ok) {
      frozen_forget(f);
      Py_RETURN_FALSE;
    }
    if (known == nullptr) {
      at.emplace(base, f->watches->size());
      f->watches->push_back(w);
    }
  }
  for (const auto& [slot, type] : *f->types) {
    if (Py_TYPE(args[slot]) != type || PyList_Append(held, args[slot]) < 0) {
      PyErr_Clear();
      frozen_forget(f);
      Py_RETURN_FALSE;
    }
    f->typed->emplace_back(args[slot], type);
  }
  PyObject* values = PyTuple_New(static_cast<Py_ssize_t>(f->selection->size()));
  if (values == nullptr) {
    frozen_forget(f);
    return nullptr;
  }
  for (size_t i = 0; i < f->selection->size(); ++i) {
    PyObject* v = args[(*f->selection)[i]];
    Py_INCREF(v);
    PyTuple_SET_ITEM(values, static_cast<Py_ssize_t>(i), v);
  }
  f->values = values;
  Py_RETURN_TRUE;
#else
  (void)args;
  Py_RETURN_FALSE;
#endif
}

PyObject* frozen_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  (void)args;
  auto* f = reinterpret_cast<Frozen*>(self);
  if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0)) {
    PyErr_SetString(PyExc_TypeError, "FrozenReads() takes no arguments");
    return nullptr;
  }
  if (f->values == nullptr) {
    Py_RETURN_NONE;
  }
  for (const Watch& w : *f->watches) {
    if (!watch_holds(w)) {
      frozen_forget(f);  // let go of what changed at once
      Py_RETURN_NONE;
    }
  }
  for (const auto& [obj, type] : *f->typed) {
    if (Py_TYPE(obj) != type) {
      frozen_forget(f);
      Py_RETURN_NONE;
    }
  }
  f->churn = f->skip = 0;  // used: no backing off
  Py_INCREF(f->values);
  return f->values;
}

bool index_in(PyObject* item, Py_ssize_t limit, Py_ssize_t& out) {
  out = PyLong_AsSsize_t(item);
  if (out == -1 && PyErr_Occurred()) {
    return false;
  }
  if (out < 0 || out >= limit) {
    PyErr_SetString(PyExc_ValueError, "a FrozenReads slot is out of range");
    return false;
  }
  return true;
}

// FrozenReads(n_roots, reads, types, selection): reads is a tuple of (base slot, is_attr,
// key), each read's slot n_roots + its position; types a tuple of (slot, exact type) checked
// on every call; selection the slots a call answers, in order.
PyObject* frozen_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  Py_ssize_t n_roots;
  PyObject *reads, *types, *selection;
  static const char* names[] = {"n_roots", "reads", "types", "selection", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nO!O!O!", const_cast<char**>(names), &n_roots,
                                   &PyTuple_Type, &reads, &PyTuple_Type, &types, &PyTuple_Type,
                                   &selection)) {
    return nullptr;
  }
  auto* f = reinterpret_cast<Frozen*>(type->tp_alloc(type, 0));
  if (f == nullptr) {
    return nullptr;
  }
  f->vectorcall = frozen_call;
  f->spec = Py_BuildValue("(nOOO)", n_roots, reads, types, selection);
  f->n_roots = n_roots;
  f->reads = new std::vector<Read>();
  f->types = new std::vector<std::pair<Py_ssize_t, PyTypeObject*>>();
  f->selection = new std::vector<Py_ssize_t>();
  f->watches = new std::vector<Watch>();
  f->typed = new std::vector<std::pair<PyObject*, PyTypeObject*>>();
  PyObject* result = reinterpret_cast<PyObject*>(f);
  if (f->spec == nullptr || n_roots < 0) {
    Py_DECREF(result);
    return nullptr;
  }
  Py_ssize_t n_slots = n_roots + PyTuple_GET_SIZE(reads);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(reads); ++i) {
    PyObject* r = PyTuple_GET_ITEM(reads, i);
    Py_ssize_t base;
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 3 ||
        !index_in(PyTuple_GET_ITEM(r, 0), n_roots + i, base)) {
      if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_TypeError, "a read is (base slot, is_attr, key)");
      }
      Py_DECREF(result);
      return nullptr;
    }
    f->reads->push_back(
        Read{base, PyObject_IsTrue(PyTuple_GET_ITEM(r, 1)) == 1, PyTuple_GET_ITEM(r, 2)});
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); ++i) {
    PyObject* t = PyTuple_GET_ITEM(types, i);
    Py_ssize_t slot;
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2 || !PyType_Check(PyTuple_GET_ITEM(t, 1)) ||
        !index_in(PyTuple_GET_ITEM(t, 0), n_slots, slot)) {
      if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_TypeError, "a type check is (slot, type)");
      }
      Py_DECREF(result);
      return nullptr;
    }
    f->types->emplace_back(slot, reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(t, 1)));
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(selection); ++i) {
    Py_ssize_t slot;
    if (!index_in(PyTuple_GET_ITEM(selection, i), n_slots, slot)) {
      Py_DECREF(result);
      return nullptr;
    }
    f->selection->push_back(slot);
  }
  return result;
}

int frozen_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* f = reinterpret_cast<Frozen*>(self);
  Py_VISIT(f->spec);
  Py_VISIT(f->held);
  Py_VISIT(f->values);
  return 0;
}

int frozen_clear(PyObject* self) {
  auto* f = reinterpret_cast<Frozen*>(self);
  if (f->watches != nullptr) {
    frozen_forget(f);
  }
  Py_CLEAR(f->spec);
  return 0;
}

void frozen_dealloc(PyObject* self) {
  auto* f = reinterpret_cast<Frozen*>(self);
  PyObject_GC_UnTrack(self);
  frozen_clear(self);
  delete f->reads;
  delete f->types;
  delete f->selection;
  delete f->watches;
  delete f->typed;
  Py_TYPE(self)->tp_free(self);
}

PyObject* frozen_repr(PyObject* self) {
  auto* f = reinterpret_cast<Frozen*>(self);
  return PyUnicode_FromFormat("<FrozenReads of %zd reads, %s>",
                              static_cast<Py_ssize_t>(f->reads->size()),
                              f->values != nullptr ? "remembered" : "empty");
}

PyMethodDef frozen_methods[] = {
    {"remember", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(frozen_remember)),
     METH_FASTCALL, "remember(*values): watch the reads that gave these values; True if watched"},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef frozen_members[] = {
    {"spec", T_OBJECT, offsetof(Frozen, spec), READONLY, "(n_roots, reads, types, selection)"},
    {nullptr, 0, 0, 0, nullptr},
};

PyTypeObject FrozenType = {PyVarObject_HEAD_INIT(nullptr, 0)};

}  // namespace
