// The Python module gsync_torch._C: the creator torch.distributed calls for backend "gsync", and
// the group's statistics.

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/python.h>

#include "process_group.hpp"

namespace py = pybind11;

namespace {
gsync_torch::process_group& group_of(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto* g = dynamic_cast<gsync_torch::process_group*>(pg.get());
  if (!g) throw py::value_error("not a gsync process group");
  return *g;
}
}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "gsync as a torch.distributed backend";
  m.def("create", &gsync_torch::create, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
        "Makes the process group of one torch.distributed group (called by torch.distributed)");
  m.def(
      "stats",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
        const auto s = group_of(pg).stats();
        py::dict d;
        d["ops"] = s.ops;
        d["busy_seconds"] = s.busy_seconds;
        d["steps"] = s.steps.steps();
        d["mean_step_ms"] = s.steps.mean_step_ms();
        d["step_seconds"] = s.steps.step_time().count();
        d["comm_seconds"] = s.steps.comm_time().count();
        d["exposed_seconds"] = s.steps.exposed_time().count();
        d["comm_share"] = s.steps.comm_ratio();
        d["overlap"] = s.steps.overlap();
        d["speedup"] = s.steps.speedup(pg->getSize());
        return d;
      },
      py::arg("group"), "The group's counters and efficiency figures (see gsync_torch.stats)");
  m.def(
      "step", [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) { group_of(pg).step(); }, py::arg("group"),
      "Ends a training step now");
  m.def(
      "reset_stats", [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) { group_of(pg).reset_stats(); }, py::arg("group"),
      "The efficiency figures count from now");
}
