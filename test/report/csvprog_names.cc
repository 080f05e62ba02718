// csvprog_names.cc: allocations from C++ functions whose demangled names need RFC 4180 quoting:
// a comma (template arguments) and double quotes (a literal operator).
#include <cstddef>

template <class A, class B> __attribute__((noinline)) void *pair_alloc(A a, B b)
{
    return new char[sizeof a + sizeof b + 59]; // 64 bytes for <int, char>
}

__attribute__((noinline)) char *operator"" _blk(unsigned long long n)
{
    return new char[n];
}

extern "C" void *csv_pair(void)
{
    return pair_alloc<int, char>(1, 'x');
}

extern "C" void *csv_literal(void)
{
    return 96_blk;
}
