# UCX, the host transport (required). Defines the target pride::ucx and PRIDE_UCX_VERSION.
#
#   PRIDE_UCX=system  pkg-config's ucx (Debian's libucx-dev; the default)
#   PRIDE_UCX=wheel   the UCX inside the libucx-cu13 (or -cu12) package of the Python interpreter
#                     CMake uses: `pip install libucx-cu13` brings UCX 1.22 with cuda_copy/cuda_ipc
#   PRIDE_UCX=<path>  a UCX install prefix (include/ucp/api/ucp.h, lib/libucp.so)
#
# The wheel's lib/pkgconfig/*.pc files name the prefix of the machine that built it, so for a wheel or
# a path the headers and libraries are located directly under the prefix instead, and the prefix's
# lib/ goes into the rpath: nothing has to be on LD_LIBRARY_PATH at run time.
set(PRIDE_UCX "system" CACHE STRING "Where UCX comes from: system (pkg-config), wheel (the libucx-cu13 Python package), or a UCX prefix path")

add_library(pride_ucx INTERFACE)
add_library(pride::ucx ALIAS pride_ucx)

if(PRIDE_UCX STREQUAL "system")
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
  target_link_libraries(pride_ucx INTERFACE PkgConfig::UCX)
  set(PRIDE_UCX_VERSION ${UCX_VERSION})
  set(PRIDE_UCX_ROOT "")
else()
  if(PRIDE_UCX STREQUAL "wheel")
    find_package(Python3 REQUIRED COMPONENTS Interpreter)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import os, libucx; print(os.path.dirname(libucx.__file__))"
      OUTPUT_VARIABLE PRIDE_UCX_ROOT OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _pride_ucx_rc ERROR_QUIET)
    if(NOT _pride_ucx_rc EQUAL 0 OR NOT PRIDE_UCX_ROOT)
      message(FATAL_ERROR "PRIDE_UCX=wheel: '${Python3_EXECUTABLE} -c \"import libucx\"' failed; "
                          "install it first (pip install libucx-cu13), or use PRIDE_UCX=system or a UCX prefix path")
    endif()
  else()
    set(PRIDE_UCX_ROOT "${PRIDE_UCX}")
  endif()
  find_path(PRIDE_UCX_INCLUDE_DIR ucp/api/ucp.h PATHS ${PRIDE_UCX_ROOT}/include NO_DEFAULT_PATH NO_CACHE)
  if(NOT PRIDE_UCX_INCLUDE_DIR)
    message(FATAL_ERROR "PRIDE_UCX=${PRIDE_UCX}: no ucp/api/ucp.h under ${PRIDE_UCX_ROOT}/include")
  endif()
  set(_pride_ucx_libs "")
  foreach(lib ucp uct ucs)
    find_library(_pride_ucx_${lib} ${lib} PATHS ${PRIDE_UCX_ROOT}/lib NO_DEFAULT_PATH NO_CACHE)
    if(NOT _pride_ucx_${lib})
      message(FATAL_ERROR "PRIDE_UCX=${PRIDE_UCX}: no lib${lib}.so under ${PRIDE_UCX_ROOT}/lib")
    endif()
    list(APPEND _pride_ucx_libs ${_pride_ucx_${lib}})
  endforeach()
  target_include_directories(pride_ucx SYSTEM INTERFACE ${PRIDE_UCX_INCLUDE_DIR})
  target_link_libraries(pride_ucx INTERFACE ${_pride_ucx_libs})
  target_link_options(pride_ucx INTERFACE "-Wl,-rpath,${PRIDE_UCX_ROOT}/lib")
  file(STRINGS ${PRIDE_UCX_INCLUDE_DIR}/ucp/api/ucp_version.h _pride_ucx_ver REGEX "define UCP_API_(MAJOR|MINOR) ")
  string(REGEX REPLACE ".*UCP_API_MAJOR +([0-9]+).*" "\\1" _major "${_pride_ucx_ver}")
  string(REGEX REPLACE ".*UCP_API_MINOR +([0-9]+).*" "\\1" _minor "${_pride_ucx_ver}")
  set(PRIDE_UCX_VERSION "${_major}.${_minor}")
endif()
if(PRIDE_UCX_ROOT)
  message(STATUS "pride: UCX ${PRIDE_UCX_VERSION} (PRIDE_UCX=${PRIDE_UCX}, at ${PRIDE_UCX_ROOT})")
else()
  message(STATUS "pride: UCX ${PRIDE_UCX_VERSION} (PRIDE_UCX=system, pkg-config)")
endif()
