// axonml_torch._C: the creator torch.distributed calls for backend "axon".
// The package's __init__.py registers it.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/python.h>

#include "axonml/torch/process_group.hpp"
#include "torch/without_gil.hpp"

namespace {

// Waits (a process group joining its threads) with the GIL released when
// this thread holds it: the threads may need the GIL to drop tensors.
void wait_releasing_gil(void (*wait)(void*), void* context) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release released;
    return wait(context);
  }
  wait(context);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  axonml::torch::install_wait_runner(wait_releasing_gil);
  m.doc() = "The axonml shared-memory runtime as torch.distributed backend 'axon'";
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::duration<float> timeout, std::vector<int> global_ranks) {
        return axonml::torch::ProcessGroupAxon::create(
            store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout),
            std::move(global_ranks));
      },
      pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
      pybind11::arg("global_ranks") = std::vector<int>{},
      pybind11::call_guard<pybind11::gil_scoped_release>(),
      "A process group of backend 'axon'; global_ranks: the members' ranks in the job (empty: the "
      "group is the whole job)");
  m.def("_finish_pending", &axonml::torch::ProcessGroupAxon::finish_all_pending,
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "Lets every axon group's pending ops finish (cancelling receives still waiting), so that no "
        "thread of theirs holds a Python object when the interpreter ends; registered with atexit");
}
