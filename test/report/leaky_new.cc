// leaky_new.cc: the C++ part of leaky: a list whose nodes come from operator new.
#include <cstddef>

namespace leaky
{
struct Node {
    long value[5];
    Node *next;
};

__attribute__((noinline)) Node *make_list(int n)
{
    Node *head = nullptr;
    for (int i = 0; i < n; i++)
        head = new Node{{i, i, i, i, i}, head};
    return head;
}
} // namespace leaky

extern "C" __attribute__((noinline)) void *leak_cxx_new(int n)
{
    return leaky::make_list(n);
}
