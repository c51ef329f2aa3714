// Turns the five arrays of each group into a GroupDesc, checking what only the binding can see:
// dimensions, dtypes, strides, devices, scale-tensor shapes (SPEC §2) and that every byte range
// the kernel will touch lies inside the allocation each array lives in (where visible: torch
// storages, NumPy buffers). Pointer alignment, ld multiples and the like are left to fp4gemm's
// own validation.
#pragma once

#include <cstdint>
#include <vector>

#include "fp4gemm/fp4gemm.hpp"
#include "tensor_view.hpp"

namespace fp4gemm::python {

struct CallOptions {
  Format format = Format::nvfp4;
  ScaleLayout layout = ScaleLayout::linear;
  OutType out = OutType::f16;
  Backend backend = Backend::automatic;
};

struct GroupViews {
  TensorView a, b, sfa, sfb, c;
};

// Validates group `g` and returns its description (alpha left at 1).
GroupDesc describe_group(int g, const GroupViews& v, const CallOptions& o);

// Checks that every view lives on the device of the first one; returns (cuda, device).
struct Placement {
  bool cuda = false;
  int device = -1;
};
Placement common_placement(const std::vector<GroupViews>& groups, const TensorView* alpha);

}  // namespace fp4gemm::python
