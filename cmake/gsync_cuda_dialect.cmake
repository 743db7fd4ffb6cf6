# nvcc 12 and later accept -std=c++20, but CMake releases before 3.26 (Debian 12 has 3.25) do not
# know it: CUDA_STANDARD 20 fails with "requires the language dialect CUDA20", and CMake passes
# nvcc's default, -std=c++17, to every CUDA file. gsync's headers need C++20, so teach this CMake
# the dialect; targets then ask for it through the compile feature cuda_std_20 (gsync::cuda does),
# and a user's .cu file that links gsync::cuda compiles without setting any standard. Include it in
# the directory whose targets compile CUDA, after that directory's enable_language(CUDA) (which
# resets the list of known features); gsync does so for its own directory and, as a subdirectory,
# for the one that includes it. Newer CMake knows the dialect and this does nothing.
if(CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA" AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0
   AND NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  list(APPEND CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
endif()
