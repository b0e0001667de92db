# bench/gloo_direct: Gloo's all-reduce, and the addon's own Gloo algorithm, called
# from C++ with no addon in between: the baseline bench/allreduce-overhead.ts
# measures the addon against.
add_executable(gloo_direct ${CMAKE_CURRENT_SOURCE_DIR}/bench/gloo_direct.cpp
                           ${CMAKE_CURRENT_SOURCE_DIR}/native/gloo/mesh_exchange.cpp)
target_link_libraries(gloo_direct PRIVATE gloo Threads::Threads)
