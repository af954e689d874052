// axonml_torch._C: the creator torch.distributed calls for backend "axon".
// The package's __init__.py registers it.
#include <pybind11/chrono.h>
#include <torch/python.h>

#include "axonml/torch/process_group.hpp"

PYBIND11_MODULE(_C, m) {
  m.doc() = "The axonml shared-memory runtime as torch.distributed backend 'axon'";
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::duration<float> timeout) {
        return axonml::torch::ProcessGroupAxon::create(
            store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
      },
      pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
      pybind11::call_guard<pybind11::gil_scoped_release>(),
      "A process group of backend 'axon' (the creator register_backend expects)");
}
