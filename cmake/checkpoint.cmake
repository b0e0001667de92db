if(NOT NCCL_NODE_DEV)
  return()
endif()

# Checkpoint I/O: stand-in libcufile.so.0 (GPUDirect Storage) in <build>/standins,
# built like cmake/gpu.cmake's stand-ins (nn_standin) and linked to the stand-in
# libcuda, whose host-backed "device" memory it reads and writes.
# Tests point NCCL_NODE_LIBCUFILE at it. Deferred to the end of the directory:
# cmake/*.cmake are included alphabetically, and nn_standin comes from gpu.cmake.
function(nn_checkpoint_standins)
  nn_standin(nccl_node_standin_cufile cufile 0 cufile.map ${NN_SI}/cufile_standin.cpp)
  target_link_libraries(nccl_node_standin_cufile PRIVATE nccl_node_standin_cuda)
  add_dependencies(${PROJECT_NAME} nccl_node_standin_cufile)
endfunction()
cmake_language(DEFER CALL nn_checkpoint_standins)
