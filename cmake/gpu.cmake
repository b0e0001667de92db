# GPU path: stand-in driver libraries for CI and the CUDA kernels (nvcc, optional).
# The addon itself never links CUDA, NCCL or NVML; it dlopens them (native/cuda/dl.cpp).

# --- Stand-ins: libcuda.so.1, libnccl.so.2, libnvidia-ml.so.1 in <build>/standins ---
# Development builds only (NCCL_NODE_DEV): their sources are not in the npm package.
if(NCCL_NODE_DEV)
  # Real sonames and C ABI, export maps like the real libraries'. Tests point
  # NCCL_NODE_LIBCUDA / NCCL_NODE_LIBNCCL / NCCL_NODE_LIBNVML at these files.
  set(NN_STANDIN_DIR ${CMAKE_BINARY_DIR}/standins)
  set(NN_SI ${CMAKE_CURRENT_SOURCE_DIR}/native/standins)

  function(nn_standin target name soversion map)
    add_library(${target} SHARED ${ARGN} ${CMAKE_CURRENT_SOURCE_DIR}/native/core/dtype.cpp)
    set_target_properties(${target} PROPERTIES OUTPUT_NAME ${name} VERSION ${soversion} SOVERSION ${soversion}
      LIBRARY_OUTPUT_DIRECTORY ${NN_STANDIN_DIR} BUILD_RPATH "$ORIGIN")
    target_link_options(${target} PRIVATE "-Wl,--version-script=${NN_SI}/${map}")
    target_link_libraries(${target} PRIVATE Threads::Threads)
  endfunction()

  nn_standin(nccl_node_standin_cuda cuda 1 cuda.map
    ${NN_SI}/cuda_standin.cpp ${NN_SI}/cuda_standin_kernels.cpp)
  nn_standin(nccl_node_standin_nccl nccl 2 nccl.map
    ${NN_SI}/nccl_standin.cpp ${NN_SI}/nccl_standin_comm.cpp ${NN_SI}/nccl_standin_net.cpp
    ${NN_SI}/nccl_standin_shrink.cpp)
  # Real libnccl needs the driver too: DT_NEEDED libcuda.so.1, found next to it.
  target_link_libraries(nccl_node_standin_nccl PRIVATE nccl_node_standin_cuda)
  nn_standin(nccl_node_standin_nvml nvidia-ml 1 nvml.map ${NN_SI}/nvml_standin.cpp)
  add_dependencies(${PROJECT_NAME} nccl_node_standin_cuda nccl_node_standin_nccl nccl_node_standin_nvml)
endif()

# --- Kernels: native/kernels/kernels.cu -> <build>/kernels/nccl_node_kernels.fatbin ---
# Loaded at run time with cuModuleLoadData; without nvcc the addon still builds and
# the kernel calls report what is missing.
find_program(NN_NVCC nvcc PATHS /usr/local/cuda/bin ENV CUDA_PATH PATH_SUFFIXES bin)
if(NN_NVCC)
  set(NN_KERNELS_OUT ${CMAKE_BINARY_DIR}/kernels/nccl_node_kernels.fatbin)
  # SASS for Hopper and Blackwell plus PTX so newer GPUs JIT; uncompressed, so the
  # image carries the kernel names in the clear.
  set(NN_CUDA_ARCHS "90;100" CACHE STRING "SASS architectures of the kernel fatbin")
  set(NN_GENCODE "")
  foreach(a ${NN_CUDA_ARCHS})
    list(APPEND NN_GENCODE -gencode arch=compute_${a},code=sm_${a})
  endforeach()
  list(GET NN_CUDA_ARCHS 0 NN_PTX_ARCH)
  list(APPEND NN_GENCODE -gencode arch=compute_${NN_PTX_ARCH},code=compute_${NN_PTX_ARCH})
  add_custom_command(OUTPUT ${NN_KERNELS_OUT}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/kernels
    COMMAND ${NN_NVCC} -fatbin -O3 ${NN_GENCODE} --no-compress
            -o ${NN_KERNELS_OUT} ${CMAKE_CURRENT_SOURCE_DIR}/native/kernels/kernels.cu
    DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/native/kernels/kernels.cu ${CMAKE_CURRENT_SOURCE_DIR}/native/kernels/kernel_defs.h
            ${CMAKE_CURRENT_SOURCE_DIR}/native/kernels/verifiable_defs.h ${CMAKE_CURRENT_SOURCE_DIR}/native/kernels/optim_defs.h
    COMMENT "nvcc: CUDA kernels -> ${NN_KERNELS_OUT}")
  add_custom_target(nccl_node_kernels ALL DEPENDS ${NN_KERNELS_OUT})
  # The toolkit's CUDA version beside the image (e.g. 13000): code from CUDA X.Y needs a
  # driver that supports X.Y, which the addon checks before cuModuleLoadData.
  execute_process(COMMAND ${NN_NVCC} --version OUTPUT_VARIABLE NN_NVCC_VERSION_TEXT)
  string(REGEX MATCH "release ([0-9]+)\\.([0-9]+)" _ "${NN_NVCC_VERSION_TEXT}")
  math(EXPR NN_KERNELS_CUDA "${CMAKE_MATCH_1} * 1000 + ${CMAKE_MATCH_2} * 10")
  file(WRITE ${CMAKE_BINARY_DIR}/kernels/nccl_node_kernels.cuda-version "${NN_KERNELS_CUDA}\n")
else()
  message(STATUS "nvcc not found: the CUDA kernels are not built (kernel calls will say so)")
endif()
