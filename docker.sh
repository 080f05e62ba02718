#!/bin/sh
# Builds the Debian 12 image and runs a command in it: ./docker.sh [COMMAND...] (default: bin/demo),
# e.g. ./docker.sh bin/test
set -eu
cd "$(dirname "$0")"
docker build -t mtrace .
[ $# -gt 0 ] || set -- bin/demo
# --init reaps the daemons' orphans the tests leave to PID 1; -t only when there is a terminal.
tty=
[ -t 0 ] && [ -t 1 ] && tty=-it
exec docker run --rm --init $tty mtrace "$@"
