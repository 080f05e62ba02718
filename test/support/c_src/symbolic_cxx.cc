// symbolic_cxx.cc: the C++ half of symbolic.c: a template function that allocates.
#include <cstdlib>

namespace symbolic
{
template <typename T> __attribute__((noinline)) T *make(std::size_t n)
{
    return static_cast<T *>(std::malloc(n * sizeof(T))); // site:cxx
}
} // namespace symbolic

extern "C" __attribute__((visibility("default"))) void *sym_cxx(std::size_t n)
{
    return symbolic::make<char>(n);
}
