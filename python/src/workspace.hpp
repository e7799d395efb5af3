// kattn.Workspace: a kattn::Workspace that Kokkos::finalize (at the interpreter's exit, or
// kattn.finalize) empties first, so that no buffer outlives Kokkos whenever Python frees the
// object; and the workspace= argument of every call.
#pragma once

#include <pybind11/pybind11.h>

#include <Kokkos_Core.hpp>
#include <set>
#include <string>

#include "kattn/errors.hpp"
#include "kattn/workspace.hpp"

namespace kattn_python {

namespace py = pybind11;

class PyWorkspace {
 public:
  PyWorkspace() {
    static const bool hooked = [] {
      Kokkos::push_finalize_hook([] {
        for (PyWorkspace* w : live()) w->ws.release();
      });
      return true;
    }();
    (void)hooked;
    live().insert(this);
  }
  ~PyWorkspace() { live().erase(this); }
  PyWorkspace(const PyWorkspace&) = delete;
  PyWorkspace& operator=(const PyWorkspace&) = delete;
  kattn::Workspace ws;

 private:
  static std::set<PyWorkspace*>& live() {
    static std::set<PyWorkspace*> s;
    return s;
  }
};

// The workspace argument: None, or a kattn.Workspace.
inline kattn::Workspace* workspace_of(const py::handle& workspace) {
  if (workspace.is_none()) return nullptr;
  if (!py::isinstance<PyWorkspace>(workspace))
    throw kattn::Error("workspace: expected a kattn.Workspace or None, got " +
                       std::string(py::str(py::type::handle_of(workspace).attr("__name__"))));
  return &workspace.cast<PyWorkspace&>().ws;
}

inline void bind_workspace(py::module_& m) {
  py::class_<PyWorkspace>(m, "Workspace",
                          "Buffers kept between calls: pass the same one as workspace= to the calls of a loop "
                          "(forward and backward alike); one per thread (and per rank), one call at a time")
      .def(py::init<>())
      .def_property_readonly(
          "bytes", [](const PyWorkspace& w) { return w.ws.bytes(); }, "bytes held")
      .def_property_readonly(
          "allocations", [](const PyWorkspace& w) { return w.ws.allocations(); }, "buffers allocated so far")
      .def(
          "release", [](PyWorkspace& w) { w.ws.release(); }, "frees every buffer no call holds")
      .def("__repr__", [](const PyWorkspace& w) {
        return "kattn.Workspace(bytes=" + std::to_string(w.ws.bytes()) +
               ", allocations=" + std::to_string(w.ws.allocations()) + ")";
      });
}

}  // namespace kattn_python
