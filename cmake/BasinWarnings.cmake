# The warning flags of basin's own targets: -Wall -Wextra, a PCH that cannot
# be used is a warning too, and BASIN_WARNINGS_AS_ERRORS makes every warning
# an error (LibTorch's headers are system headers, so theirs do not count).
function(basin_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Winvalid-pch)
  if(BASIN_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
