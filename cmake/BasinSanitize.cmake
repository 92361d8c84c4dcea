# BASIN_SANITIZE: a -fsanitize list ("address,undefined"; ON means that one)
# for every target of this project, compile and link alike: one precompiled
# header serves them all only if all compile alike (see basin_reuse_pch).
# LibTorch and the other prebuilt libraries stay uninstrumented;
# scripts/sanitize.sh runs the tests with the runtime options and
# suppressions that this needs.
set(BASIN_SANITIZE "" CACHE STRING
    "Sanitizers for basin's own targets, e.g. address,undefined (ON: address,undefined)")
if(BASIN_SANITIZE STREQUAL "ON")
  set(BASIN_SANITIZE "address,undefined")
elseif(BASIN_SANITIZE STREQUAL "OFF")
  set(BASIN_SANITIZE "")
endif()
if(BASIN_SANITIZE)
  message(STATUS "basin: -fsanitize=${BASIN_SANITIZE}")
  add_compile_options(-fsanitize=${BASIN_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${BASIN_SANITIZE})
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12's flow analysis under the sanitizers' instrumentation warns
    # falsely about libstdc++'s <regex> (std::function "may be used uninitialized").
    add_compile_options(-Wno-maybe-uninitialized)
  endif()
endif()

# Programs outside this project that link an instrumented basin need the
# sanitizer runtimes too (first in their link line, where ASan wants them).
function(basin_sanitize_consumers target)
  if(BASIN_SANITIZE)
    string(REPLACE "fuzzer-no-link" "" runtimes "${BASIN_SANITIZE}")
    string(REGEX REPLACE ",+" "," runtimes "${runtimes}")
    string(REGEX REPLACE "^,|,$" "" runtimes "${runtimes}")
    if(runtimes)
      target_link_options(${target} INTERFACE -fsanitize=${runtimes})
    endif()
  endif()
endfunction()
