// The plans' pimpl guard: a moved-from object holds no Impl; every call names that clearly.
#pragma once

#include <memory>
#include <string>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail {

template <typename Impl>
const Impl& checked_impl(const std::unique_ptr<Impl>& impl, const char* type) {
  if (!impl) throw Error("plan", -1, std::string("this ") + type + " was moved from and holds nothing");
  return *impl;
}

}  // namespace fp4gemm::detail
