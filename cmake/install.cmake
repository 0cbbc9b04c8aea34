# `cmake --install` as a dependency: the CMake package (find_package(loom) -> loom::engine and
# one loom::<layer> per library) and a pkg-config file (loom.pc). Included after lib/.
include(CMakePackageConfigHelpers)

# loom::engine: what a program needs to load GGUF models and run them (Model, Session,
# generate/perplexity, the CPU and simulated devices, the planner).
add_library(loom_engine INTERFACE)
target_link_libraries(loom_engine INTERFACE loom_model
  "$<LINK_LIBRARY:WHOLE_ARCHIVE,loom::backends_registration>" "$<LINK_LIBRARY:WHOLE_ARCHIVE,loom::mpi_registration>")
set_target_properties(loom_engine PROPERTIES EXPORT_NAME engine)
add_library(loom::engine ALIAS loom_engine)
install(TARGETS loom_engine EXPORT loomTargets)

# What the package's users must find again: MPI and CUDA only when this build linked them.
get_target_property(meta_defs loom_meta INTERFACE_COMPILE_DEFINITIONS)
get_target_property(meta_private_defs loom_meta COMPILE_DEFINITIONS)
set(LOOM_EXPORT_MPI OFF)
set(LOOM_EXPORT_CUDA OFF)
if(meta_defs MATCHES "LOOM_HAVE_MPI")
  set(LOOM_EXPORT_MPI ON)
endif()
if(meta_private_defs MATCHES "LOOM_HAVE_NCCL")
  set(LOOM_EXPORT_CUDA ON)
endif()

set(loom_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/loom)
install(EXPORT loomTargets NAMESPACE loom:: DESTINATION ${loom_cmake_dir})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/loomConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/loomConfig.cmake INSTALL_DESTINATION ${loom_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/loomConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/loomConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/loomConfigVersion.cmake
  DESTINATION ${loom_cmake_dir})

# pkg-config: the engine's static libraries, dependents before what they use (a depth-first
# walk of the loom_* link dependencies), then their system libraries.
set(loom_pc_order "")
function(loom_pc_visit target)
  if(target IN_LIST loom_pc_seen)
    return()
  endif()
  list(APPEND loom_pc_seen ${target})
  set(loom_pc_seen ${loom_pc_seen} PARENT_SCOPE)
  get_target_property(deps ${target} INTERFACE_LINK_LIBRARIES)
  foreach(dep IN LISTS deps)
    if(dep MATCHES "^loom_" AND TARGET ${dep})
      loom_pc_visit(${dep})
      set(loom_pc_seen ${loom_pc_seen} PARENT_SCOPE)
      set(loom_pc_order ${loom_pc_order} PARENT_SCOPE)
    endif()
  endforeach()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "STATIC_LIBRARY")
    list(PREPEND loom_pc_order ${target})
    set(loom_pc_order ${loom_pc_order} PARENT_SCOPE)
  endif()
endfunction()
set(loom_pc_seen "")
loom_pc_visit(loom_model)
# the registration units first and whole (their static initializers register the backends)
set(LOOM_PC_LIBS " -Wl,--whole-archive -lloom_backends_registration -lloom_mpi_registration -Wl,--no-whole-archive")
loom_pc_visit(loom_backends_registration)
foreach(lib IN LISTS loom_pc_order)
  string(APPEND LOOM_PC_LIBS " -l${lib}")
endforeach()
set(LOOM_PC_REQUIRES "fmt spdlog libpcre2-8")
if(LOOM_EXPORT_MPI)
  string(APPEND LOOM_PC_REQUIRES " ompi-cxx")
endif()
if(LOOM_EXPORT_CUDA AND NCCL_LIBRARY)
  get_filename_component(nccl_dir ${NCCL_LIBRARY} DIRECTORY)
  string(APPEND LOOM_PC_LIBS " -L${nccl_dir} -lnccl -lcudart")
endif()
# relocatable: the prefix is found from the .pc file's own folder (cmake --install --prefix P)
file(RELATIVE_PATH LOOM_PC_UP /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${CMAKE_CURRENT_LIST_DIR}/loom.pc.in ${CMAKE_CURRENT_BINARY_DIR}/loom.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/loom.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
