// The Python module gsync_torch._C: the creator torch.distributed calls for backend "gsync", and
// the group's statistics.

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/python.h>

#include "process_group.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "gsync as a torch.distributed backend";
  m.def("create", &gsync_torch::create, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
        "Makes the process group of one torch.distributed group (called by torch.distributed)");
  m.def(
      "stats",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
        auto* g = dynamic_cast<gsync_torch::process_group*>(pg.get());
        if (!g) throw py::value_error("not a gsync process group");
        const auto s = g->stats();
        py::dict d;
        d["ops"] = s.ops;
        d["busy_seconds"] = s.busy_seconds;
        return d;
      },
      py::arg("group"), "The group's counters: operations issued, seconds the operations ran");
}
