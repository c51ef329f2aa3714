// The kernel registry (host/kernel_registry.hpp): every kernel is named once, and a device
// without a fast kernel gets an Error naming options.backend / options.device, never a kernel
// that cannot run there. Host tier: DeviceInfo values are built here, no GPU is touched.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "host/kernel_registry.hpp"

namespace fp4gemm::detail {
namespace {

DeviceInfo fake_device(int major, int minor, bool fast) {
  DeviceInfo d;
  d.index = 0;
  d.name = "test device";
  d.sm_major = major, d.sm_minor = minor;
  d.multiprocessors = 132;
  d.has_fast_kernel = fast;
  return d;
}

TEST(KernelRegistry, NamesAreUniqueAndEveryEntryComplete) {
  std::set<std::string> names;
  for (const KernelEntry& k : kernels()) {
    EXPECT_TRUE(names.insert(k.name).second) << k.name;
    EXPECT_NE(k.runs_on, nullptr) << k.name;
    EXPECT_NE(k.build, nullptr) << k.name;
  }
  ASSERT_FALSE(moe_kernels().empty());
  for (const MoeKernelEntry& k : moe_kernels()) {
    EXPECT_TRUE(names.insert(k.name).second) << k.name;
    EXPECT_NE(k.runs_on, nullptr) << k.name;
    EXPECT_NE(k.build, nullptr) << k.name;
  }
}

TEST(KernelRegistry, SelectsByBackendAndDevice) {
  const DeviceInfo hopper = fake_device(9, 0, true), ampere = fake_device(8, 0, false);
  EXPECT_STREQ(select_kernel(Backend::automatic, hopper).name, "sm90_fused_swapab");
  EXPECT_STREQ(select_kernel(Backend::fast, hopper).name, "sm90_fused_swapab");
  EXPECT_STREQ(select_kernel(Backend::reference, hopper).name, "reference");
  EXPECT_STREQ(select_kernel(Backend::reference, ampere).name, "reference");
  EXPECT_STREQ(select_moe_kernel(hopper).name, "sm90_fused_swapab_moe");
}

TEST(KernelRegistry, NoFastKernelIsAnErrorNamingTheOption) {
  const DeviceInfo ampere = fake_device(8, 0, false);
  try {
    select_kernel(Backend::fast, ampere);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "options.backend");
    EXPECT_NE(std::string(e.what()).find("sm_80"), std::string::npos) << e.what();
  }
  try {
    select_moe_kernel(ampere);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "options.device");
    EXPECT_NE(std::string(e.what()).find("needs sm_90"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4gemm::detail
