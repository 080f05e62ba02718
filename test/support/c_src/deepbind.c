/* deepbind: loads a plugin with RTLD_DEEPBIND, as php loads its extensions, so that the plugin's
 * calls of the malloc family bind to glibc's, past a preloaded library. Blocks cross between the
 * two: the plugin frees 100 of the program's, the program keeps 100 of the plugin's and frees 50
 * more. Lost: the plugin's two blocks of 222 bytes and the program's one of 333. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void *kept[100];
void *volatile sink;

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    void *plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!plugin) {
        fprintf(stderr, "deepbind: %s\n", dlerror());
        return 1;
    }
    void (*take)(void *) = (void (*)(void *))dlsym(plugin, "plugin_take");
    void *(*give)(size_t) = (void *(*)(size_t))dlsym(plugin, "plugin_give");
    void (*lose)(void) = (void (*)(void))dlsym(plugin, "plugin_lose");
    if (!take || !give || !lose) return 1;
    for (int i = 0; i < 100; i++)
        take(malloc(64 + (size_t)i));
    for (int i = 0; i < 100; i++)
        kept[i] = give(100);
    for (int i = 0; i < 50; i++)
        free(give(50));
    lose();
    sink = malloc(333);
    sink = NULL;
    printf("deepbind: %d blocks kept\n", kept[99] ? 100 : 0);
    return 0;
}
