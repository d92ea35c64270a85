# Included by CMake right after llama.cpp's own project() call (CMAKE_PROJECT_INCLUDE), when
# llama-cpp-python builds it from source: skip llama.cpp's "common" library and its HTTP
# client. The Python bindings load only libllama and libggml, so this cuts the build by a
# third without changing what is installed.
if(PROJECT_NAME STREQUAL "llama.cpp")
    set(LLAMA_BUILD_COMMON OFF CACHE BOOL "" FORCE)
endif()
