// leaky_cxx.cc: the C++ allocation of the test NIF, in a namespace so that its name is mangled.
#include <cstddef>

namespace leaky
{
__attribute__((noinline)) char *cxx_new(std::size_t n)
{
    return new char[n];
}
} // namespace leaky

extern "C" __attribute__((visibility("default"))) void *leaky_cxx_new(std::size_t n)
{
    return leaky::cxx_new(n);
}

extern "C" __attribute__((visibility("default"))) void leaky_cxx_delete(void *p)
{
    delete[] static_cast<char *>(p);
}
