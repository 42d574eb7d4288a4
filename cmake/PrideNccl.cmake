# NCCL, the GPU transport (backend/transport/nccl). Optional: pride::nccl exists and PRIDE_HAVE_NCCL is
# ON only where NCCL's header and library are found. Where it looks (PRIDE_NCCL):
#   auto   (default) the nvidia-nccl wheel next to the torch that Python imports (the NCCL that torch
#          itself loads, so the process holds one NCCL), then the system (nccl.h, libnccl.so);
#   wheel  the wheel only;  system  the system only;  off  no NCCL;  <prefix>  <prefix>/include and lib.
# Only "auto" lets a build go on without NCCL; naming a place makes "not found" an error.
set(PRIDE_NCCL "auto" CACHE STRING "Where NCCL comes from: auto|wheel|system|off|<prefix>")
set(PRIDE_HAVE_NCCL OFF)
if(PRIDE_NCCL STREQUAL "off")
  return()
endif()

set(_pride_nccl_hints "")
if(PRIDE_NCCL STREQUAL "auto" OR PRIDE_NCCL STREQUAL "wheel")
  find_package(Python3 QUIET COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    # nvidia.nccl is a namespace package: its directory is __path__[0], it has no __file__.
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl as n; print(list(n.__path__)[0])"
      OUTPUT_VARIABLE _pride_nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0 AND EXISTS "${_pride_nccl_wheel}/include/nccl.h")
      list(APPEND _pride_nccl_hints "${_pride_nccl_wheel}")
    endif()
  endif()
elseif(NOT PRIDE_NCCL STREQUAL "system")
  list(APPEND _pride_nccl_hints "${PRIDE_NCCL}")
endif()

unset(PRIDE_NCCL_INCLUDE_DIR CACHE)
unset(PRIDE_NCCL_LIBRARY CACHE)
if(_pride_nccl_hints)
  find_path(PRIDE_NCCL_INCLUDE_DIR nccl.h PATHS ${_pride_nccl_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
  # The wheel ships only the versioned name, which is also the soname torch's libraries load.
  find_library(PRIDE_NCCL_LIBRARY NAMES libnccl.so.2 nccl PATHS ${_pride_nccl_hints} PATH_SUFFIXES lib NO_DEFAULT_PATH)
endif()
if(NOT PRIDE_NCCL_INCLUDE_DIR AND (PRIDE_NCCL STREQUAL "auto" OR PRIDE_NCCL STREQUAL "system"))
  find_path(PRIDE_NCCL_INCLUDE_DIR nccl.h)
  find_library(PRIDE_NCCL_LIBRARY NAMES nccl libnccl.so.2)
endif()

if(PRIDE_NCCL_INCLUDE_DIR AND PRIDE_NCCL_LIBRARY)
  file(STRINGS "${PRIDE_NCCL_INCLUDE_DIR}/nccl.h" _v REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
         PRIDE_NCCL_VERSION "${_v}")
  add_library(pride_nccl_lib SHARED IMPORTED GLOBAL)
  set_target_properties(pride_nccl_lib PROPERTIES IMPORTED_LOCATION "${PRIDE_NCCL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${PRIDE_NCCL_INCLUDE_DIR}")
  get_filename_component(_pride_nccl_libdir "${PRIDE_NCCL_LIBRARY}" DIRECTORY)
  set_target_properties(pride_nccl_lib PROPERTIES INTERFACE_LINK_OPTIONS "-Wl,-rpath,${_pride_nccl_libdir}")
  add_library(pride::nccl ALIAS pride_nccl_lib)
  set(PRIDE_HAVE_NCCL ON)
  message(STATUS "pride: NCCL ${PRIDE_NCCL_VERSION}: ${PRIDE_NCCL_LIBRARY}")
endif()
if(NOT PRIDE_HAVE_NCCL AND NOT PRIDE_NCCL STREQUAL "auto")
  message(FATAL_ERROR "PRIDE_NCCL=${PRIDE_NCCL}: no nccl.h and libnccl found there")
endif()
