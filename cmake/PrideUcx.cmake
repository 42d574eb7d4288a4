# UCX, the host transport (required). Defines the target pride::ucx and PRIDE_UCX_VERSION.
#
#   PRIDE_UCX=auto    the default: the system's where pkg-config finds it, else the wheel's where the
#                     Python interpreter has one (`pip install libucx-cu13` on a machine without root)
#   PRIDE_UCX=system  pkg-config's ucx (Debian's libucx-dev)
#   PRIDE_UCX=wheel   the UCX inside the libucx-cu13 (or -cu12) package of the Python interpreter
#                     CMake uses: `pip install libucx-cu13` brings UCX 1.22 with cuda_copy/cuda_ipc
#   PRIDE_UCX=<path>  a UCX install prefix (include/ucp/api/ucp.h, lib/libucp.so)
#
# The wheel's lib/pkgconfig/*.pc files name the prefix of the machine that built it, so for a wheel or
# a path the headers and libraries are located directly under the prefix instead, and the prefix's
# lib/ goes into the rpath: nothing has to be on LD_LIBRARY_PATH at run time.
set(PRIDE_UCX "auto" CACHE STRING "Where UCX comes from: auto (system, else wheel), system (pkg-config), wheel (the libucx-cu13 Python package), or a UCX prefix path")

add_library(pride_ucx INTERFACE)
add_library(pride::ucx ALIAS pride_ucx)

# The UCX directory of the libucx Python package (libucx-cu13, -cu12) of the interpreter CMake finds, or "".
function(pride_find_ucx_wheel out)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(root "")
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import os, libucx; print(os.path.dirname(libucx.__file__))"
      OUTPUT_VARIABLE root OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
    if(NOT rc EQUAL 0)
      set(root "")
    endif()
  endif()
  set(${out} "${root}" PARENT_SCOPE)
endfunction()

set(_pride_ucx_from "${PRIDE_UCX}")  # what this configure uses; PRIDE_UCX keeps what was asked for
if(PRIDE_UCX STREQUAL "auto")
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(UCX QUIET IMPORTED_TARGET ucx)
  endif()
  if(UCX_FOUND)
    set(_pride_ucx_from "system")
  else()
    pride_find_ucx_wheel(_pride_ucx_wheel_root)
    if(NOT _pride_ucx_wheel_root)
      message(FATAL_ERROR "pride needs UCX and found none: pkg-config has no 'ucx' and the Python interpreter "
                          "has no libucx package. Install one of them (Debian/Ubuntu: apt install libucx-dev; "
                          "without root: pip install libucx-cu13, which also moves CUDA memory), or point "
                          "PRIDE_UCX at a UCX install prefix.")
    endif()
    set(_pride_ucx_from "wheel")
  endif()
endif()

if(_pride_ucx_from STREQUAL "system")
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
  target_link_libraries(pride_ucx INTERFACE PkgConfig::UCX)
  set(PRIDE_UCX_VERSION ${UCX_VERSION})
  set(PRIDE_UCX_ROOT "")
else()
  if(_pride_ucx_from STREQUAL "wheel")
    pride_find_ucx_wheel(PRIDE_UCX_ROOT)
    if(NOT PRIDE_UCX_ROOT)
      message(FATAL_ERROR "PRIDE_UCX=wheel: '${Python3_EXECUTABLE} -c \"import libucx\"' failed; "
                          "install it first (pip install libucx-cu13), or use PRIDE_UCX=system or a UCX prefix path")
    endif()
  else()
    set(PRIDE_UCX_ROOT "${PRIDE_UCX}")
  endif()
  find_path(PRIDE_UCX_INCLUDE_DIR ucp/api/ucp.h PATHS ${PRIDE_UCX_ROOT}/include NO_DEFAULT_PATH NO_CACHE)
  if(NOT PRIDE_UCX_INCLUDE_DIR)
    message(FATAL_ERROR "PRIDE_UCX=${_pride_ucx_from}: no ucp/api/ucp.h under ${PRIDE_UCX_ROOT}/include")
  endif()
  set(_pride_ucx_libs "")
  foreach(lib ucp uct ucs)
    find_library(_pride_ucx_${lib} ${lib} PATHS ${PRIDE_UCX_ROOT}/lib NO_DEFAULT_PATH NO_CACHE)
    if(NOT _pride_ucx_${lib})
      message(FATAL_ERROR "PRIDE_UCX=${_pride_ucx_from}: no lib${lib}.so under ${PRIDE_UCX_ROOT}/lib")
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
if(PRIDE_UCX STREQUAL "auto")
  set(_pride_ucx_how "PRIDE_UCX=auto: ${_pride_ucx_from}")
else()
  set(_pride_ucx_how "PRIDE_UCX=${PRIDE_UCX}")
endif()
if(PRIDE_UCX_ROOT)
  message(STATUS "pride: UCX ${PRIDE_UCX_VERSION} (${_pride_ucx_how}, at ${PRIDE_UCX_ROOT})")
else()
  message(STATUS "pride: UCX ${PRIDE_UCX_VERSION} (${_pride_ucx_how}, pkg-config)")
endif()
