# find_package(basin) support: installed headers keep the <basin/...> prefix.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS basin basin_tokenizer basin_models basin_datasets basin_launch EXPORT basinTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(dir core algorithms callbacks schedulers models datasets launch)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/basin/${dir}
          FILES_MATCHING PATTERN "*.h" PATTERN "precompiled.h" EXCLUDE
          # Headers that only split one part's sources, no API of it:
          PATTERN "fully_sharded_unit.h" EXCLUDE PATTERN "pickle_opcodes.h" EXCLUDE
          PATTERN "image_decode.h" EXCLUDE PATTERN "node_beat.h" EXCLUDE PATTERN "store_messages.h" EXCLUDE
          PATTERN "launcher_store.h" EXCLUDE
          # The models' parts: a model is used by its registered name.
          PATTERN "gpt.h" EXCLUDE PATTERN "llama.h" EXCLUDE PATTERN "transformer_layers.h" EXCLUDE
          PATTERN "hugging_face_files.h" EXCLUDE)
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/basin.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/basin)  # the umbrella
# The tokenizer's API is the Tokenizer; its components are read from the file, never built by hand.
install(FILES ${PROJECT_SOURCE_DIR}/tokenizer/tokenizer.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/basin/tokenizer)

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/basin)
install(EXPORT basinTargets NAMESPACE basin:: DESTINATION ${config_dir})
configure_package_config_file(cmake/basinConfig.cmake.in
  ${PROJECT_BINARY_DIR}/basinConfig.cmake INSTALL_DESTINATION ${config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/basinConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/basinConfig.cmake ${PROJECT_BINARY_DIR}/basinConfigVersion.cmake
        DESTINATION ${config_dir})
