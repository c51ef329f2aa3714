// Smoke test of the public enums (placeholder; real host tests live beside it).
#include <gtest/gtest.h>
#include "fp4gemm/fp4gemm.hpp"
TEST(Smoke, ScaleBlock) { EXPECT_EQ(fp4gemm::scale_block_size(fp4gemm::Format::nvfp4), 16); }
