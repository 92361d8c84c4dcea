# Reuses the library's precompiled header in `target`. GCC accepts a PCH only
# under the flags it was built with: the library compiles with -fPIC, so
# executables do too (instead of CMake's -fPIE), which links fine as PIE.
function(basin_reuse_pch target)
  target_precompile_headers(${target} REUSE_FROM basin)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    set_property(TARGET ${target} PROPERTY POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
  basin_warnings(${target})
endfunction()
