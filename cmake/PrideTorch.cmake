# Locates the torch that the Python interpreter imports (the pip wheel) and exposes
# its C++ libraries as imported targets. We do not use TorchConfig.cmake: on the CUDA
# wheel it insists on a full CUDA/cuDNN toolchain even for CPU-only consumers.
find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c
    "import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch.compiled_with_cxx11_abi())); print(torch.__version__)"
  OUTPUT_VARIABLE _pride_torch_out OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _pride_torch_rc)
if(NOT _pride_torch_rc EQUAL 0)
  message(FATAL_ERROR "PRIDE_WITH_TORCH: '${Python3_EXECUTABLE} -c import torch' failed; install torch in that environment or pass -DPRIDE_WITH_TORCH=OFF")
endif()
string(REPLACE "\n" ";" _pride_torch_out "${_pride_torch_out}")
list(GET _pride_torch_out 0 PRIDE_TORCH_DIR)
list(GET _pride_torch_out 1 PRIDE_TORCH_CXX11_ABI)
list(GET _pride_torch_out 2 PRIDE_TORCH_VERSION)
message(STATUS "pride: torch ${PRIDE_TORCH_VERSION} at ${PRIDE_TORCH_DIR}")

function(_pride_torch_lib target libname)
  find_library(_lib_${libname} ${libname} PATHS ${PRIDE_TORCH_DIR}/lib NO_DEFAULT_PATH REQUIRED)
  add_library(${target} SHARED IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES IMPORTED_LOCATION ${_lib_${libname}})
endfunction()
_pride_torch_lib(pride_torch_c10 c10)
_pride_torch_lib(pride_torch_cpu_lib torch_cpu)
_pride_torch_lib(pride_torch_lib torch)
_pride_torch_lib(pride_torch_python_lib torch_python)

add_library(pride_torch_cpu INTERFACE)
target_include_directories(pride_torch_cpu SYSTEM INTERFACE
  ${PRIDE_TORCH_DIR}/include ${PRIDE_TORCH_DIR}/include/torch/csrc/api/include)
# torch/include carries fmt 12, found before Debian's fmt 9 in translation units that see torch's
# headers; those units use it header-only (fmt's versioned namespaces keep the two apart) and must not
# include spdlog (backend/common/log.h), which is built against fmt 9.
target_compile_definitions(pride_torch_cpu INTERFACE _GLIBCXX_USE_CXX11_ABI=${PRIDE_TORCH_CXX11_ABI} FMT_HEADER_ONLY=1)
target_link_libraries(pride_torch_cpu INTERFACE pride_torch_c10 pride_torch_cpu_lib)
set_target_properties(pride_torch_cpu PROPERTIES INTERFACE_LINK_OPTIONS "-Wl,-rpath,${PRIDE_TORCH_DIR}/lib")
add_library(pride::torch_cpu ALIAS pride_torch_cpu)

# torch's CUDA runtime pieces (c10_cuda: streams, guards, the caching allocator), where this torch has them.
find_library(_lib_c10_cuda c10_cuda PATHS ${PRIDE_TORCH_DIR}/lib NO_DEFAULT_PATH)
if(_lib_c10_cuda)
  add_library(pride_torch_c10_cuda SHARED IMPORTED GLOBAL)
  set_target_properties(pride_torch_c10_cuda PROPERTIES IMPORTED_LOCATION ${_lib_c10_cuda})
  add_library(pride_torch_cuda INTERFACE)
  target_link_libraries(pride_torch_cuda INTERFACE pride_torch_cpu pride_torch_c10_cuda)
  add_library(pride::torch_cuda ALIAS pride_torch_cuda)
endif()

add_library(pride_torch_python INTERFACE)
target_link_libraries(pride_torch_python INTERFACE pride_torch_cpu pride_torch_lib pride_torch_python_lib Python3::Module)
add_library(pride::torch_python ALIAS pride_torch_python)
