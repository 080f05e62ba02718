/* deepbind_plugin: deepbind.c's plugin, loaded with RTLD_DEEPBIND. */
#include <stdlib.h>
#include <string.h>

void *volatile plugin_sink;

__attribute__((visibility("default"))) void plugin_take(void *block)
{
    free(block);
}

__attribute__((visibility("default"))) void *plugin_give(size_t n)
{
    return memset(malloc(n), 1, n);
}

__attribute__((visibility("default"))) void plugin_lose(void)
{
    for (int i = 0; i < 2; i++)
        plugin_sink = memset(malloc(222), 2, 222);
    plugin_sink = NULL;
}
