// How keys and values are stored, for kattn::attention and the distributed calls: the kinds
// kattn::kv::dense, ragged, paged and cascade, each a small struct of views (and a layout) made by
// the function of the same name.
#pragma once

#include "kattn/paged.hpp"
#include "kattn/ragged.hpp"

namespace kattn {

namespace kv {

// Keys and values of each sequence side by side in a batch: k, v [B, Nk, Hkv, D].
template <class KView, class VView>
struct Dense {
  KView k;
  VView v;
};
// Sequences packed without padding (ragged.hpp): k, v [total_kv, Hkv, D].
template <class KView, class VView, class MemorySpace>
struct Ragged {
  KView k;
  VView v;
  RaggedLayout<MemorySpace> layout;
};
// A paged cache (paged.hpp): k, v [num_pages, page_size, Hkv, D].
template <class KView, class VView, class MemorySpace>
struct Paged {
  KView k;
  VView v;
  PagedLayout<MemorySpace> layout;
};
// A prefix shared by every request (k_prefix, v_prefix [Np, Hkv, D]), then each request's own keys
// (a Ragged or Paged kind).
template <class KPView, class VPView, class Suffix>
struct Cascade {
  KPView k_prefix;
  VPView v_prefix;
  Suffix suffix;
};

template <class KView, class VView>
Dense<KView, VView> dense(const KView& k, const VView& v) {
  return {k, v};
}
template <class KView, class VView, class MemorySpace>
Ragged<KView, VView, MemorySpace> ragged(const KView& k, const VView& v, const RaggedLayout<MemorySpace>& layout) {
  return {k, v, layout};
}
template <class KView, class VView, class MemorySpace>
Paged<KView, VView, MemorySpace> paged(const KView& k, const VView& v, const PagedLayout<MemorySpace>& layout) {
  return {k, v, layout};
}
template <class KPView, class VPView, class Suffix>
Cascade<KPView, VPView, Suffix> cascade(const KPView& k_prefix, const VPView& v_prefix, const Suffix& suffix) {
  return {k_prefix, v_prefix, suffix};
}

}  // namespace kv

}  // namespace kattn
