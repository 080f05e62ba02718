// storm_new.cc: the storm's C++ allocations, for storm.c: operator new[] and the aligned operator
// new (C++17), each freed by its own delete. libstdc++ makes them with malloc and aligned_alloc.
#include <cstddef>
#include <new>

extern "C" unsigned char *storm_new(size_t n, int aligned)
{
    if (aligned)
        return static_cast<unsigned char *>(
            ::operator new[](n, std::align_val_t(64), std::nothrow));
    return new (std::nothrow) unsigned char[n];
}

extern "C" void storm_delete(unsigned char *p, int aligned)
{
    if (aligned)
        ::operator delete[](p, std::align_val_t(64));
    else
        delete[] p;
}
