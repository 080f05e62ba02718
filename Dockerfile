# Debian with the packages bin/setup installs, and a built copy of the repository: Debian 12
# (bookworm) unless built with --build-arg DEBIAN=trixie (Debian 13). ./docker.sh builds it.
ARG DEBIAN=bookworm
FROM debian:${DEBIAN}

# MTRACE_IMAGE tells bin/setup that it runs in this image, where Docker itself is not needed.
ENV LANG=C.UTF-8 MTRACE_IMAGE=1
WORKDIR /mtrace

# bin/setup alone first, so that the packages' layer survives changes to the sources.
COPY bin/setup bin/setup
RUN bin/setup

COPY . .
# Build products copied from the host (see .gitignore) would pass for up to date: start clean.
# The copy becomes a repository of its own (the host's .git may be a worktree's link that leads
# nowhere here), whose index lists the sources, as the tests that copy the repository read it.
RUN rm -rf .git _build deps priv/*.so priv/mtrace-inject c_src/*/*.o c_src/makevars.mk \
        test/support/c_src/*.o test/support/c_src/*.so \
    && git init -q && git add -A \
    && make -C c_src \
    && make -C test/support/c_src \
    && MIX_ENV=test mix compile

CMD ["bin/demo"]
