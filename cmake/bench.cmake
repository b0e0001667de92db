if(NOT NCCL_NODE_DEV)
  return()
endif()

# The addon's sources the C++ benchmarks below share, free of N-API: one static library,
# from which each executable links only the objects it uses.
add_library(bench_native STATIC ${CMAKE_CURRENT_SOURCE_DIR}/native/core/errors.cpp
                                ${CMAKE_CURRENT_SOURCE_DIR}/native/core/copy_bytes.cpp
                                ${CMAKE_CURRENT_SOURCE_DIR}/native/core/dtype.cpp
                                ${CMAKE_CURRENT_SOURCE_DIR}/native/net/tcp_mesh.cpp
                                ${CMAKE_CURRENT_SOURCE_DIR}/native/net/tcp_ring.cpp
                                ${CMAKE_CURRENT_SOURCE_DIR}/native/gloo/mesh_exchange.cpp
                                ${CMAKE_CURRENT_SOURCE_DIR}/native/shm/shm_collectives.cpp
                                ${CMAKE_CURRENT_SOURCE_DIR}/native/shm/shm_segment.cpp
                                ${CMAKE_CURRENT_SOURCE_DIR}/native/nccl/nccl_api.cpp
                                ${CMAKE_CURRENT_SOURCE_DIR}/native/cuda/cuda_api.cpp
                                ${CMAKE_CURRENT_SOURCE_DIR}/native/cuda/dl.cpp)
target_link_libraries(bench_native PUBLIC gloo Threads::Threads rt ${CMAKE_DL_LIBS})

# bench/gloo_direct: Gloo's all-reduce, and the addon's own Gloo algorithm, called
# from C++ with no addon in between: the baseline bench/allreduce-overhead.ts
# measures the addon against.
add_executable(gloo_direct ${CMAKE_CURRENT_SOURCE_DIR}/bench/gloo_direct.cpp)
target_link_libraries(gloo_direct PRIVATE bench_native)

# bench/nccl_direct: ncclAllReduce from C++ through the addon's own dlopen loaders
# (stand-ins in CI, the real libraries on a GPU host): the NCCL baseline.
add_executable(nccl_direct ${CMAKE_CURRENT_SOURCE_DIR}/bench/nccl_direct.cpp)
target_link_libraries(nccl_direct PRIVATE bench_native)

# bench/gloo_algos: every Gloo algorithm for all-reduce, all-gather and
# reduce-scatter timed side by side, the table the addon's algorithm choice follows.
add_executable(gloo_algos ${CMAKE_CURRENT_SOURCE_DIR}/bench/gloo_algos.cpp)
target_link_libraries(gloo_algos PRIVATE bench_native)

# bench/ring_ab: the backend's own TCP ring against each of Gloo's algorithms in
# alternating blocks within the same processes (bench/comm/ring-ab.ts).
add_executable(ring_ab ${CMAKE_CURRENT_SOURCE_DIR}/bench/ring_ab.cpp)
target_link_libraries(ring_ab PRIVATE bench_native)

# bench/mpi_collectives: Open MPI's collectives from C++, the shared-memory path's
# baseline in bench/shm/allreduce.ts. Only where an MPI implementation is installed
# (Debian: openmpi-bin libopenmpi-dev); nothing else needs it.
# The C API from C++: the deprecated C++ bindings are not wanted.
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI QUIET COMPONENTS CXX)
if(MPI_CXX_FOUND)
  add_executable(mpi_collectives ${CMAKE_CURRENT_SOURCE_DIR}/bench/mpi_collectives.cpp)
  target_link_libraries(mpi_collectives PRIVATE MPI::MPI_CXX)
endif()

# bench/shm_round: the shared-memory round of a small blocking all-reduce from C++, with
# no addon: the floor under allReduceSync() in bench/shm/allreduce.ts.
add_executable(shm_round ${CMAKE_CURRENT_SOURCE_DIR}/bench/shm_round.cpp)
target_link_libraries(shm_round PRIVATE bench_native)

# bench/tcp_directions: a 2-process exchange over loopback TCP on one connection against
# one connection each way, the layout native/net/tcp_mesh.cpp opens; plain sockets, no addon.
add_executable(tcp_directions ${CMAKE_CURRENT_SOURCE_DIR}/bench/tcp_directions.cpp)

# bench/tcp_landing: a one-way transfer over the backend's own TcpMesh into a buffer at
# each page offset, straight in against through the bounce buffer (net::aliasedLanding).
add_executable(tcp_landing ${CMAKE_CURRENT_SOURCE_DIR}/bench/tcp_landing.cpp)
target_link_libraries(tcp_landing PRIVATE bench_native)

# bench/agreement_shape: a rooted call's round over the own TcpMesh, every rank to every
# rank in one hop against every rank to the root and back.
add_executable(agreement_shape ${CMAKE_CURRENT_SOURCE_DIR}/bench/agreement_shape.cpp)
target_link_libraries(agreement_shape PRIVATE bench_native)

# bench/copy_bytes: host copies by how far the destination lies past the source in a
# page, glibc's memcpy against copyBytes (native/core/copy_bytes.cpp).
add_executable(copy_bytes ${CMAKE_CURRENT_SOURCE_DIR}/bench/copy_bytes.cpp)
target_link_libraries(copy_bytes PRIVATE bench_native)
