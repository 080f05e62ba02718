/* forkprog: the parent leaks 100 bytes (fork_parent), forks; the child leaks 200 bytes
 * (fork_child) and exits through exit(), so its exit report runs; the parent waits for it and
 * exits. Prints "child <pid>". */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/wait.h>

#include "common.h"

NAMED static void *fork_parent(void)
{
    return malloc(100);
}

NAMED static void *fork_child(void)
{
    return malloc(200);
}

int main(void)
{
    fork_parent();
    pid_t pid = fork();
    if (pid == 0) {
        fork_child();
        exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    say("child ");
    say_num((uint64_t)pid, 0);
    say("\n");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
