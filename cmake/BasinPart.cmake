# basin_library_part(<name> <export name> SOURCES ...): one of basin's installed
# library parts (models, datasets, launch) as a shared library on top of
# basin::basin, exported as basin::<export name>.
function(basin_library_part name export_name)
  cmake_parse_arguments(PART "" "" "SOURCES" ${ARGN})
  add_library(${name} SHARED ${PART_SOURCES})
  add_library(basin::${export_name} ALIAS ${name})
  target_link_libraries(${name} PUBLIC basin::basin)
  # No <name>_EXPORTS define (the PCH's macros must match); the installed
  # library finds libbasin beside it and keeps the path to the LibTorch it was
  # built against.
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${export_name} VERSION ${PROJECT_VERSION} SOVERSION 0
                                           DEFINE_SYMBOL "" INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH TRUE)
  basin_reuse_pch(${name})
endfunction()

# Models and datasets register themselves by name when their library loads. A
# program that names them only in its config references none of their symbols,
# and a linker that drops unreferenced libraries (--as-needed, the default on
# some distributions) would drop the registrations with them. The option turns
# --as-needed off for the program's whole link line, as Debian's linker has it
# by default: every library linked is loaded. (Keeping just the part needs
# CMake 3.24's $<LINK_LIBRARY:...> in the consumer too; tests/consumer links
# with --as-needed to prove the registrations survive.)
function(basin_keep_registrations name)
  target_link_options(${name} INTERFACE "LINKER:--no-as-needed")
endfunction()
