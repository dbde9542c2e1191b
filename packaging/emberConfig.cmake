# CMake package of ember's C API, installed by `make install PREFIX=...` into PREFIX/lib/cmake/ember.
#
#   find_package(ember 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE ember::ember)          # shared library
#   target_link_libraries(app PRIVATE ember::ember_static)   # static library
#
# Relocatable: paths are found from this file's location (PREFIX/lib/cmake/ember), not written in.

get_filename_component(_ember_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

if(NOT TARGET ember::ember)
  add_library(ember::ember SHARED IMPORTED)
  set_target_properties(ember::ember PROPERTIES
    IMPORTED_LOCATION "${_ember_prefix}/lib/libember.so"
    IMPORTED_NO_SONAME TRUE
    INTERFACE_INCLUDE_DIRECTORIES "${_ember_prefix}/include")
endif()

if(NOT TARGET ember::ember_static)
  add_library(ember::ember_static STATIC IMPORTED)
  # What the Rust static library needs from the system (`cargo rustc -- --print native-static-libs`).
  set_target_properties(ember::ember_static PROPERTIES
    IMPORTED_LOCATION "${_ember_prefix}/lib/libember.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_ember_prefix}/include"
    INTERFACE_LINK_LIBRARIES "gcc_s;util;rt;pthread;m;dl")
endif()

unset(_ember_prefix)
