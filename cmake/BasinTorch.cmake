# Finds LibTorch and checks that what was found is one LibTorch.
#
# LibTorch's config searches the system's library folders before its own, so
# with Debian's libtorch installed, a LibTorch given by its share/cmake folder
# (what PyPI's torch.utils.cmake_prefix_path names) links Debian's libtorch.so
# under its own headers. Give the LibTorch root instead (the folder holding
# lib/ and include/), whose lib/ is then searched first.
find_package(Torch REQUIRED)

function(basin_check_one_libtorch)
  get_filename_component(torch_lib_dir ${TORCH_LIBRARY} DIRECTORY)
  set(torch_cpu_location "")
  if(TARGET torch_cpu)
    get_target_property(configurations torch_cpu IMPORTED_CONFIGURATIONS)
    foreach(configuration IN LISTS configurations)
      if(NOT torch_cpu_location)
        get_target_property(torch_cpu_location torch_cpu IMPORTED_LOCATION_${configuration})
      endif()
    endforeach()
  endif()
  if(torch_cpu_location)
    get_filename_component(torch_cpu_dir ${torch_cpu_location} DIRECTORY)
    file(REAL_PATH ${torch_lib_dir} torch_lib_dir)
    file(REAL_PATH ${torch_cpu_dir} torch_cpu_dir)
    if(NOT torch_lib_dir STREQUAL torch_cpu_dir)
      message(FATAL_ERROR "basin: two LibTorch installations are mixed: libtorch.so from ${torch_lib_dir}, "
              "libtorch_cpu.so from ${torch_cpu_dir}. Pass the LibTorch root (the folder with lib/ and include/) "
              "as CMAKE_PREFIX_PATH, not its share/cmake folder.")
    endif()
  endif()
  message(STATUS "basin: LibTorch ${Torch_VERSION} from ${torch_lib_dir}")
  get_filename_component(root ${torch_lib_dir} DIRECTORY)
  set(BASIN_TORCH_ROOT ${root} PARENT_SCOPE)  # for the installed package's config
endfunction()
basin_check_one_libtorch()

# PyPI's LibTorch 2.x exports copies of libstdc++ functions (std::filesystem
# among them; pytorch/pytorch#133437) that crash when a program binds to them.
# Naming the C++ runtime before LibTorch makes every program find the real
# ones first: the dynamic linker searches libraries in the order linked.
set(BASIN_TORCH_LIBRARIES stdc++ ${TORCH_LIBRARIES})

# A wheel's LibTorch loads the CUDA libraries of the nvidia-* wheels beside it
# (its RUNPATH says so), but the linker, resolving libtorch_cuda's own needs,
# looks in the system's folders first: with a CUDA toolkit installed it finds
# the toolkit's older NCCL and fails. Point it at the wheels' libraries.
get_filename_component(basin_torch_parent ${BASIN_TORCH_ROOT} DIRECTORY)
file(GLOB basin_wheel_library_dirs LIST_DIRECTORIES true ${basin_torch_parent}/nvidia/*/lib)
if(basin_wheel_library_dirs)
  string(REPLACE ";" ":" basin_rpath_link "${basin_wheel_library_dirs}")
  list(APPEND BASIN_TORCH_LIBRARIES "-Wl,-rpath-link,${basin_rpath_link}")
endif()
