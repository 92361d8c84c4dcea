# NCCL comes with CUDA builds of LibTorch only; Debian's CPU build has none.
# BASIN_WITH_NCCL=AUTO turns it on when LibTorch was built with NCCL and
# nccl.h is at hand (PyPI's torch carries it in nvidia/nccl beside itself).
set(BASIN_WITH_NCCL AUTO CACHE STRING "Use NCCL process groups: AUTO, ON or OFF")
set_property(CACHE BASIN_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)

function(basin_configure_nccl target)
  set(have_nccl OFF)
  if(NOT BASIN_WITH_NCCL STREQUAL "OFF" AND TARGET torch_cuda)
    get_target_property(cuda_definitions torch_cuda INTERFACE_COMPILE_DEFINITIONS)
    get_filename_component(torch_parent ${TORCH_INSTALL_PREFIX} DIRECTORY)
    find_path(BASIN_NCCL_INCLUDE_DIR nccl.h HINTS ${torch_parent}/nvidia/nccl/include ${CUDAToolkit_INCLUDE_DIRS}
              ${CUDA_INCLUDE_DIRS})
    if("USE_C10D_NCCL" IN_LIST cuda_definitions AND BASIN_NCCL_INCLUDE_DIR)
      set(have_nccl ON)
    endif()
  endif()
  if(BASIN_WITH_NCCL STREQUAL "ON" AND NOT have_nccl)
    message(FATAL_ERROR "BASIN_WITH_NCCL=ON but LibTorch has no NCCL (a CPU build?) or nccl.h was not found")
  endif()
  if(have_nccl)
    target_compile_definitions(${target} PUBLIC BASIN_HAVE_NCCL=1)
    # Before the CUDA toolkit's own copy: the header of the NCCL LibTorch links.
    target_include_directories(${target} SYSTEM BEFORE PRIVATE ${BASIN_NCCL_INCLUDE_DIR})
  endif()
  message(STATUS "basin: NCCL ${have_nccl}")
endfunction()
