# Debian 12 (bookworm) with the packages bin/setup installs, and a built copy of the repository.
FROM debian:bookworm

ENV LANG=C.UTF-8
WORKDIR /mtrace

# bin/setup alone first, so that the packages' layer survives changes to the sources.
COPY bin/setup bin/setup
RUN bin/setup

COPY . .
# Build products copied from the host (see .gitignore) would pass for up to date: start clean.
RUN rm -rf _build deps priv/*.so c_src/*.o c_src/makevars.mk \
        test/support/c_src/*.o test/support/c_src/*.so \
    && make -C c_src \
    && make -C test/support/c_src \
    && MIX_ENV=test mix compile

CMD ["bin/demo"]
