# NCCL comes with CUDA builds of LibTorch only; Debian's CPU build has none.
# BASIN_WITH_NCCL=AUTO turns it on when LibTorch's headers and libraries have it.
set(BASIN_WITH_NCCL AUTO CACHE STRING "Use NCCL process groups: AUTO, ON or OFF")
set_property(CACHE BASIN_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)

function(basin_configure_nccl target)
  set(have_nccl OFF)
  if(NOT BASIN_WITH_NCCL STREQUAL "OFF")
    find_path(BASIN_NCCL_HEADER torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp
              HINTS ${TORCH_INCLUDE_DIRS})
    find_library(BASIN_NCCL_LIBRARY NAMES nccl)
    if(BASIN_NCCL_HEADER AND BASIN_NCCL_LIBRARY AND DEFINED CUDA_TOOLKIT_ROOT_DIR)
      set(have_nccl ON)
    endif()
  endif()
  if(BASIN_WITH_NCCL STREQUAL "ON" AND NOT have_nccl)
    message(FATAL_ERROR "BASIN_WITH_NCCL=ON but LibTorch has no NCCL (CPU build?)")
  endif()
  if(have_nccl)
    target_compile_definitions(${target} PUBLIC BASIN_HAVE_NCCL=1)
  endif()
  message(STATUS "basin: NCCL ${have_nccl}")
endfunction()
