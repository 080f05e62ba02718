/* options_dump: prints the MTRACE_* variables of mt_options (config.h). Without an argument, one
 * a line: name, default and meaning, separated by tabs (priv/mtrace-options.txt, which
 * bin/mtrace --help, bin/bench and the tests read). With "markdown", docs/configuration.md's
 * table of them (priv/mtrace-options.md, which `make -C c_src docs` copies into the page). So no
 * other list of them exists. */
#include <stdio.h>
#include <string.h>

#include "base/config.h"

int main(int argc, char **argv)
{
    int markdown = argc > 1 && strcmp(argv[1], "markdown") == 0;
    if (markdown) printf("| variable | default | meaning |\n| --- | --- | --- |\n");
    for (size_t i = 0; i < mt_options_count; i++) {
        const struct mt_option *o = &mt_options[i];
        char def[64];
        mt_option_default(o, def, sizeof def);
        if (!markdown)
            printf("%s\t%s\t%s\n", o->name, def, o->meaning);
        else if (o->kind == MT_OPTION_CHOICE)
            printf("| `%s` | `%s` | %s |\n", o->name, def, o->doc);
        else
            printf("| `%s` | %s | %s |\n", o->name, def, o->doc);
    }
    return ferror(stdout) ? 1 : 0;
}
