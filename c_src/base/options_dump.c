/* options_dump: prints the MTRACE_* variables of mt_options (config.h), one a line: name, default
 * and meaning, separated by tabs. The build writes it to priv/mtrace-options.txt, which
 * bin/mtrace --help, bin/bench and the tests read, so that no other list of them exists. */
#include <stdio.h>

#include "base/config.h"

int main(void)
{
    for (size_t i = 0; i < mt_options_count; i++) {
        char def[64];
        mt_option_default(&mt_options[i], def, sizeof def);
        printf("%s\t%s\t%s\n", mt_options[i].name, def, mt_options[i].meaning);
    }
    return ferror(stdout) ? 1 : 0;
}
