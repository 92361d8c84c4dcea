# Registers a GoogleTest executable's tests with CTest a suite per entry
# (`Suite` runs `--gtest_filter=Suite.*`), not a test per entry as
# gtest_discover_tests does. Each entry is a process, and a process that
# loads LibTorch costs about half a second before its first test: over 670
# tests and two LibTorch builds that was a tenth of CI. A suite's tests then
# share a process, as users' loops and scripts/repeat-tests.sh run them.
#   basin_add_test_suites(TARGET [PER_TEST])
# PER_TEST (BASIN_CTEST_PER_TEST=ON) registers each test instead, for runs
# that pick tests by name across suites (scripts/gpu-check.sh: -R 'Cuda|Nccl').
#
# As gtest_discover_tests does, the list is read from the built executable
# after each link (cmake -P this file in script mode), into a file that
# CTest includes.
if(CMAKE_SCRIPT_MODE_FILE)
  # Script mode: EXE, OUT, WORKDIR, PER_TEST. A suite may take 120 s a test
  # (a test's own limit was 300 s) and at most 1500 s in all.
  execute_process(COMMAND "${EXE}" --gtest_list_tests WORKING_DIRECTORY "${WORKDIR}"
                  OUTPUT_VARIABLE listing RESULT_VARIABLE result TIMEOUT 60)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${EXE} --gtest_list_tests failed (${result}):\n${listing}")
  endif()
  # A parameter's comment may hold ; [ or ], which a CMake list would read as its own.
  string(REGEX REPLACE "[][;]" "_" listing "${listing}")
  string(REPLACE "\n" ";" lines "${listing}")
  set(script "")
  set(suites "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE " *#.*$" "" line "${line}")  # "  # GetParam() = ..."
    if(line MATCHES "^([^ ]+)\\.$")
      set(suite "${CMAKE_MATCH_1}")
      list(APPEND suites "${suite}")
      set(count_${suite} 0)
    elseif(line MATCHES "^  ([^ ]+)$" AND NOT CMAKE_MATCH_1 MATCHES "^DISABLED_" AND NOT suite MATCHES "^DISABLED_")
      math(EXPR count_${suite} "${count_${suite}} + 1")
      if(PER_TEST)
        string(APPEND script "add_test([==[${suite}.${CMAKE_MATCH_1}]==] \"${EXE}\" [==[--gtest_filter=${suite}.${CMAKE_MATCH_1}]==])\n"
               "set_tests_properties([==[${suite}.${CMAKE_MATCH_1}]==] PROPERTIES WORKING_DIRECTORY \"${WORKDIR}\" "
               "TIMEOUT 300 SKIP_REGULAR_EXPRESSION [==[\\[  SKIPPED \\]]==])\n")
      endif()
    endif()
  endforeach()
  if(NOT PER_TEST)
    foreach(suite IN LISTS suites)
      if(count_${suite} EQUAL 0)
        continue()
      endif()
      math(EXPR timeout "120 * ${count_${suite}}")
      if(timeout GREATER 1500)
        set(timeout 1500)
      endif()
      # No skip expression: a suite whose tests partly skip has passed; each
      # skipped test says why in the suite's output.
      string(APPEND script "add_test([==[${suite}]==] \"${EXE}\" [==[--gtest_filter=${suite}.*]==])\n"
             "set_tests_properties([==[${suite}]==] PROPERTIES WORKING_DIRECTORY \"${WORKDIR}\" "
             "TIMEOUT ${timeout} COST ${count_${suite}})\n")
    endforeach()
  endif()
  file(WRITE "${OUT}" "${script}")
  return()
endif()

option(BASIN_CTEST_PER_TEST "Register every GoogleTest test with CTest on its own (default: a suite per entry)" OFF)
set(BASIN_TEST_SUITES_SCRIPT "${CMAKE_CURRENT_LIST_FILE}")

function(basin_add_test_suites target)
  set(listed "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND "${CMAKE_COMMAND}" -D "EXE=$<TARGET_FILE:${target}>" -D "OUT=${listed}"
            -D "WORKDIR=${CMAKE_CURRENT_BINARY_DIR}" -D "PER_TEST=${BASIN_CTEST_PER_TEST}"
            -P "${BASIN_TEST_SUITES_SCRIPT}"
    VERBATIM)
  file(WRITE "${include_file}"
       "if(EXISTS \"${listed}\")\n  include(\"${listed}\")\nelse()\n  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
