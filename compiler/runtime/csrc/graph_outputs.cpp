// The storage moves of gradients handed out in a CUDA graph's memory
// (compiler/runtime/cudagraphs.py); a part of the C++ extension (cpp_ext.h).

#include "cpp_ext.h"

#include <c10/core/TensorImpl.h>

using namespace jc;

namespace {

// ---- Gradients handed out in a CUDA graph's own memory ------------------------------------
//
// compiler/runtime/cudagraphs.py hands a training backward's gradients to autograd as
// aliases of the graph's output memory, each on a storage of its own, instead of copying them
// out after every replay (densenet121: 364 allocations and copies a step). Autograd's engine
// puts them in `.grad` without a copy. Before the next replay overwrites that memory, every
// alias still referenced from anywhere but the runner (a `.grad` not reset by zero_grad, a
// list of gradients the user kept, a view of one) is moved to memory of its own: the runner
// copies its values into a fresh tensor and `adopt_storage` swaps the two storages' memory,
// so every tensor and view on the alias's storage now reads the copy, and the alias's old
// pointer into the graph dies with the fresh tensor.

// `live_storages(tensors)`: the positions of the tensors whose storage is referenced by more
// than the one tensor given (another tensor or view on it, a Python storage object), or
// None when one is not an exact torch.Tensor (cudagraphs.py then copies every output).
PyObject* live_storages(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1 || !PyList_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "live_storages(tensors: list)");
    return nullptr;
  }
  PyObject* tensors = args[0];
  PyObject* live = PyList_New(0);
  if (live == nullptr) {
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tensors); ++i) {
    bool other_tensor = false;
    c10::TensorImpl* impl = impl_of(PyList_GET_ITEM(tensors, i), checked_types, &other_tensor);
    if (impl == nullptr) {
      Py_DECREF(live);
      if (PyErr_Occurred()) {
        return nullptr;
      }
      Py_RETURN_NONE;
    }
    if (!impl->has_storage()) {
      Py_DECREF(live);
      Py_RETURN_NONE;
    }
    c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
    if (c10::raw::intrusive_ptr::use_count(storage) > 1) {
      PyObject* index = PyLong_FromSsize_t(i);
      if (index == nullptr || PyList_Append(live, index) < 0) {
        Py_XDECREF(index);
        Py_DECREF(live);
        return nullptr;
      }
      Py_DECREF(index);
    }
  }
  return live;
}

// `adopt_storage(alias, fresh)`: swaps the memory (pointer, allocator, resizability) of the
// two tensors' storages. Both must be exact torch.Tensors on one device with storages of the
// same size (the runner makes `fresh` as `empty_strided` of the alias's size and strides).
PyObject* adopt_storage(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "adopt_storage(alias, fresh)");
    return nullptr;
  }
  c10::TensorImpl* impls[2];
  for (int k = 0; k < 2; ++k) {
    bool other_tensor = false;
    impls[k] = impl_of(args[k], checked_types, &other_tensor);
    if (impls[k] == nullptr) {
      if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_TypeError, "adopt_storage takes exact torch.Tensors");
      }
      return nullptr;
    }
    if (!impls[k]->has_storage()) {
      PyErr_SetString(PyExc_ValueError, "adopt_storage: a tensor without storage");
      return nullptr;
    }
  }
  c10::StorageImpl* alias = impls[0]->storage().unsafeGetStorageImpl();
  c10::StorageImpl* fresh = impls[1]->storage().unsafeGetStorageImpl();
  if (alias == fresh || alias->nbytes() != fresh->nbytes() ||
      alias->device() != fresh->device()) {
    PyErr_SetString(PyExc_ValueError, "adopt_storage: storages of another size or device");
    return nullptr;
  }
  // (StorageImpl::swap_data_ptr does this in one call, but torch 2.11 lacks it.)
  at::DataPtr memory = fresh->set_data_ptr(at::DataPtr(nullptr, fresh->device()));
  at::DataPtr into_graph = alias->set_data_ptr(std::move(memory));
  fresh->set_data_ptr_noswap(std::move(into_graph));  // freed with `fresh`
  at::Allocator* allocator = fresh->allocator();
  bool resizable = fresh->resizable();
  fresh->set_resizable(false);
  fresh->set_allocator(alias->allocator());
  alias->set_allocator(allocator);
  alias->set_resizable(resizable && allocator != nullptr);
  Py_RETURN_NONE;
}

}  // namespace

namespace {

PyMethodDef graph_output_functions[] = {
    {"live_storages", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(live_storages)),
     METH_FASTCALL, "live_storages(tensors): see graph_outputs.cpp"},
    {"adopt_storage", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(adopt_storage)),
     METH_FASTCALL, "adopt_storage(alias, fresh): see graph_outputs.cpp"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool jc::add_graph_outputs(PyObject* module) {
  return PyModule_AddFunctions(module, graph_output_functions) == 0;
}
