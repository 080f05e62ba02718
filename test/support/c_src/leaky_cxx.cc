// leaky_cxx.cc: the C++ allocation of the test NIF, in a namespace so that its name is mangled.
#include <cstddef>

namespace leaky
{
__attribute__((noinline)) char *cxx_new(std::size_t n)
{
    return new char[n];
}

// An object with a vtable: its first word names its class.
struct Widget {
    virtual ~Widget() = default;
    long id = 42;
};

__attribute__((noinline)) Widget *make_widget()
{
    return new Widget;
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

extern "C" __attribute__((visibility("default"))) void *leaky_cxx_widget(std::size_t)
{
    return leaky::make_widget();
}
