# Helpers shared by every target: warnings, and one call per library / tool / test suite.
# Sources are globbed per folder so that adding a file to a module needs no CMake edit.

function(loom_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>)
  if(LOOM_NATIVE)
    target_compile_options(${target} PRIVATE -march=native)
  endif()
endfunction()

# loom_library(NAME DEPS...) : lib/<dir>/src/*.cpp, public headers in lib/<dir>/include
function(loom_library name)
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/*.cpp)
  add_library(${name} STATIC ${srcs})
  # installed as loom::<layer> (loom_model -> loom::model), the same name inside this build
  string(REGEX REPLACE "^loom_" "" layer ${name})
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${layer})
  add_library(loom::${layer} ALIAS ${name})
  target_include_directories(${name}
    PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARGN})
  loom_warnings(${name})
  install(TARGETS ${name} EXPORT loomTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()

# The registration units (lib/backends/registration), linked whole: nothing names their objects.
# WITH_MPI: also MPI's world (tools that never start MPI leave it out and need no libmpi).
function(loom_link_registration target)
  cmake_parse_arguments(arg "WITH_MPI" "" "" ${ARGN})
  target_link_libraries(${target} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,loom::backends_registration>")
  if(arg_WITH_MPI)
    target_link_libraries(${target} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,loom::mpi_registration>")
  endif()
endfunction()

# loom_tool(NAME) : tools/<name>/*.cpp -> bin/loom-<name>
function(loom_tool name)
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${name}/*.cpp)
  if(NOT srcs)
    return()  # a tool folder still being written
  endif()
  add_executable(loom-${name} ${srcs})
  target_link_libraries(loom-${name} PRIVATE loom_tools_common)
  if(name STREQUAL "gguf")
    loom_link_registration(loom-${name})  # never starts MPI
  else()
    loom_link_registration(loom-${name} WITH_MPI)
  endif()
  loom_warnings(loom-${name})
  install(TARGETS loom-${name} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endfunction()

# loom_test_suite(NAME LABEL DEPS...) : tests/<name>/*.cpp -> one GoogleTest binary, tests discovered by CTest
function(loom_test_suite name label)
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${name}/*.cpp)
  if(NOT srcs)
    return()
  endif()
  add_executable(test-${name} ${srcs} $<TARGET_OBJECTS:loom_test_tmpdir>)
  # every suite gets the built-in backends registered (lib/backends/registration)
  target_link_libraries(test-${name} PRIVATE GTest::gtest GTest::gtest_main ${ARGN})
  loom_link_registration(test-${name} WITH_MPI)
  target_compile_definitions(test-${name} PRIVATE
    LOOM_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared"
    LOOM_BIN_DIR="${CMAKE_BINARY_DIR}/bin"
    LOOM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  loom_warnings(test-${name})
  # The tests' own code needs no -O3: what they time and what they check is the libraries' (built
  # -O3). -O1 compiles them in ~60% of the time (the suites are a third of the build).
  target_compile_options(test-${name} PRIVATE $<$<CONFIG:Release>:-O1>)
  gtest_discover_tests(test-${name} PROPERTIES LABELS ${label} DISCOVERY_TIMEOUT 60)
endfunction()
