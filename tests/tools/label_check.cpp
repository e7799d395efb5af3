// A Kokkos Tools connector that checks kattn's profiling labels while a program runs:
//   - every kernel is named: "Kokkos::..." (Kokkos' own: view fills, copies) or
//     "kattn::<area>::<step>", never the type name Kokkos makes up for an unnamed kernel;
//   - a kattn kernel runs inside the region of its area ("kattn::attention::tile" inside
//     "kattn::attention"), so space-time-stack and the other tools group it there;
//   - memory allocated inside kattn's regions is labelled "kattn::..." (or is Kokkos' own).
// At exit it prints one line to stderr, "kattn-label-check: ... ok" or "... FAIL", preceded by
// one "kattn-label-check: violation: ..." line per problem. Load it with KOKKOS_TOOLS_LIBS
// (Kokkos >= 4) or KOKKOS_PROFILE_LIBRARY (Kokkos 3); KATTN_LABEL_CHECK_VERBOSE=1 lists every
// kernel. Plain C interface: no Kokkos headers needed, works with Kokkos 3.4 and 4.x.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

struct State {
  std::mutex mutex;
  std::vector<std::string> regions;
  std::set<std::string> violations;
  long kernels = 0, kattn_kernels = 0, regions_seen = 0, kattn_allocations = 0;
  bool verbose = false;
};

State& state() {
  static State s;
  return s;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

bool in_kattn_region(const State& s) {
  for (const auto& r : s.regions)
    if (starts_with(r, "kattn::")) return true;
  return false;
}

std::string stack(const State& s) {
  std::string out;
  for (const auto& r : s.regions) out += (out.empty() ? "" : " > ") + r;
  return out.empty() ? "(no region)" : out;
}

void kernel(const char* kind, const char* name_c) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const std::string name = name_c ? name_c : "";
  ++s.kernels;
  if (s.verbose) std::fprintf(stderr, "kattn-label-check: %s '%s' in %s\n", kind, name.c_str(), stack(s).c_str());
  if (starts_with(name, "Kokkos::")) return;
  if (!starts_with(name, "kattn::")) {
    s.violations.insert(std::string(kind) + " '" + name + "' is not labelled kattn::<area>::<step> (in " + stack(s) +
                        ")");
    return;
  }
  ++s.kattn_kernels;
  // Its area: the name without its last "::step".
  const std::string area = name.substr(0, name.rfind("::"));
  bool found = false;
  for (const auto& r : s.regions) found = found || r == area;
  if (area == "kattn" || !found)
    s.violations.insert(std::string(kind) + " '" + name + "' does not run inside the region '" + area + "' (in " +
                        stack(s) + ")");
}

}  // namespace

extern "C" {

struct Kokkos_Profiling_SpaceHandle {
  char name[64];
};

void kokkosp_init_library(const int, const std::uint64_t, const std::uint32_t, void*) {
  const char* v = std::getenv("KATTN_LABEL_CHECK_VERBOSE");
  state().verbose = v && *v && *v != '0';
}

void kokkosp_finalize_library() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.kattn_kernels == 0) s.violations.insert("no kattn kernel ran: nothing was checked");
  if (!s.regions.empty()) s.violations.insert("regions left open at exit: " + stack(s));
  for (const auto& v : s.violations) std::fprintf(stderr, "kattn-label-check: violation: %s\n", v.c_str());
  std::fprintf(stderr, "kattn-label-check: %ld kernels (%ld kattn::), %ld regions, %ld kattn allocations: %s\n",
               s.kernels, s.kattn_kernels, s.regions_seen, s.kattn_allocations, s.violations.empty() ? "ok" : "FAIL");
}

void kokkosp_begin_parallel_for(const char* name, const std::uint32_t, std::uint64_t*) { kernel("parallel_for", name); }
void kokkosp_begin_parallel_reduce(const char* name, const std::uint32_t, std::uint64_t*) {
  kernel("parallel_reduce", name);
}
void kokkosp_begin_parallel_scan(const char* name, const std::uint32_t, std::uint64_t*) {
  kernel("parallel_scan", name);
}
void kokkosp_end_parallel_for(const std::uint64_t) {}
void kokkosp_end_parallel_reduce(const std::uint64_t) {}
void kokkosp_end_parallel_scan(const std::uint64_t) {}

void kokkosp_push_profile_region(const char* name) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.regions.emplace_back(name ? name : "");
  ++s.regions_seen;
}

void kokkosp_pop_profile_region() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.regions.empty()) {
    s.violations.insert("a region was popped that was never pushed");
    return;
  }
  s.regions.pop_back();
}

void kokkosp_allocate_data(const Kokkos_Profiling_SpaceHandle, const char* label, const void*, const std::uint64_t) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!in_kattn_region(s)) return;
  const std::string name = label ? label : "";
  if (starts_with(name, "kattn::"))
    ++s.kattn_allocations;
  else if (!starts_with(name, "Kokkos::"))  // Kokkos' own, e.g. team scratch on first use
    s.violations.insert("allocation '" + name + "' inside " + stack(s) + " is not labelled kattn::...");
}

}  // extern "C"
