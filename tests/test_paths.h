#pragma once

// Where the tests find the sources and the programs they run. The paths are
// absolute, so they are compiled into test_paths.cpp alone: as command-line
// definitions of every test file they made each of those miss ccache in
// every fresh clone (CCACHE_BASEDIR rewrites paths in arguments, not inside
// macro definitions).

namespace basin::test {
const char* source_dir();
const char* train_exe();
const char* hand_loop_exe();
const char* run_exe();
const char* consolidate_exe();
const char* generate_exe();
const char* tokenize_exe();
}  // namespace basin::test

#define BASIN_SOURCE_DIR (::basin::test::source_dir())
#define BASIN_TRAIN_EXE (::basin::test::train_exe())
#define BASIN_HAND_LOOP_EXE (::basin::test::hand_loop_exe())
#define BASIN_RUN_EXE (::basin::test::run_exe())
#define BASIN_CONSOLIDATE_EXE (::basin::test::consolidate_exe())
#define BASIN_GENERATE_EXE (::basin::test::generate_exe())
#define BASIN_TOKENIZE_EXE (::basin::test::tokenize_exe())
