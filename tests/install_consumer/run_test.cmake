# Host-tier test (cmake -P): install the build tree into a scratch prefix, then configure, build and
# run tests/install_consumer against that prefix with find_package(fp4gemm). Needs no GPU.
# Inputs (-D): BUILD_DIR, CONFIG, SOURCE_DIR (the consumer), WORK_DIR (scratch, wiped), GENERATOR,
# MAKE_PROGRAM, CXX_COMPILER, CUDA_ROOT.
foreach(v BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER CUDA_ROOT)
  if(NOT DEFINED ${v} OR "${${v}}" STREQUAL "")
    message(FATAL_ERROR "install_consumer: -D${v}=... is required")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()

function(step name)
  message(STATUS "install_consumer: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${name} failed (${rc})")
  endif()
endfunction()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")

step("cmake --install into ${prefix}"
  "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" --config "${CONFIG}")
if(NOT EXISTS "${prefix}/lib/cmake/fp4gemm/fp4gemmConfig.cmake"
   AND NOT EXISTS "${prefix}/lib64/cmake/fp4gemm/fp4gemmConfig.cmake")
  message(FATAL_ERROR "install_consumer: no fp4gemmConfig.cmake under ${prefix}")
endif()

set(configure_args
  -S "${SOURCE_DIR}" -B "${consumer_build}" -G "${GENERATOR}"
  "-DCMAKE_PREFIX_PATH=${prefix}"
  "-DFP4GEMM_EXPECTED_PREFIX=${prefix}"
  "-DCMAKE_BUILD_TYPE=${CONFIG}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCUDAToolkit_ROOT=${CUDA_ROOT}"
  # Only the prefix may supply fp4gemm: no user/system package registries.
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
step("configure the consumer" "${CMAKE_COMMAND}" ${configure_args})
step("build the consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" --config "${CONFIG}")

find_program(consumer_exe consumer PATHS "${consumer_build}" "${consumer_build}/${CONFIG}"
  NO_DEFAULT_PATH REQUIRED)
step("run ${consumer_exe}" "${consumer_exe}")
