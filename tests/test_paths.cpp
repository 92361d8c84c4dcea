#include "test_paths.h"

// BASIN_TEST_* come from tests/CMakeLists.txt, for this file only.
namespace basin::test {
const char* source_dir() { return BASIN_TEST_SOURCE_DIR; }
const char* train_exe() { return BASIN_TEST_TRAIN_EXE; }
const char* hand_loop_exe() { return BASIN_TEST_HAND_LOOP_EXE; }
const char* run_exe() { return BASIN_TEST_RUN_EXE; }
const char* consolidate_exe() { return BASIN_TEST_CONSOLIDATE_EXE; }
const char* generate_exe() { return BASIN_TEST_GENERATE_EXE; }
const char* tokenize_exe() { return BASIN_TEST_TOKENIZE_EXE; }
}  // namespace basin::test
