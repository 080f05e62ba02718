# The build proper, with the variables makevars.sh wrote. POSIX make syntax only.
include makevars.mk
SRC = .
include objects.mk

WARN = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
# Frame pointers in the tracer's own frames keep the frame-pointer unwinding mode sound.
ALL_CFLAGS = -std=gnu11 -O2 -g -fPIC -fvisibility=hidden -fno-semantic-interposition \
	-fno-omit-frame-pointer $(WARN) -I$(SRC) $(ERL_CFLAGS) $(UNWIND_CFLAGS) $(DW_CFLAGS) $(CFLAGS)
LIB = ../priv/mtrace.so
OPTIONS = ../priv/mtrace-options.txt
OPTIONS_MD = ../priv/mtrace-options.md
INJECT = ../priv/mtrace-inject

all: $(LIB) $(OPTIONS) $(OPTIONS_MD) $(INJECT)

# bin/mtrace attach, report and detach's injector: a program of its own, which links nothing of
# the library.
$(INJECT): attach/inject.c
	mkdir -p ../priv
	$(CC) $(ALL_CFLAGS) -o $(INJECT).tmp attach/inject.c
	mv $(INJECT).tmp $(INJECT)

# Linked to a temporary name and renamed: a process that has the old file mapped keeps it intact.
$(LIB): $(OBJS) mtrace.version
	mkdir -p ../priv
	$(CC) -shared -o $(LIB).tmp $(OBJS) -Wl,--version-script=mtrace.version -Wl,-z,defs \
		$(UNWIND_LIBS) $(IBERTY_LIBS) -llzma -lm -ldl -lpthread $(LDFLAGS)
	mv $(LIB).tmp $(LIB)

$(OBJS): $(HDRS) makevars.mk objects.mk

# The variables, as the library declares them (config.h), for bin/mtrace --help and the tests,
# and as docs/configuration.md's table.
options_dump: base/options_dump.c $(SRC)/base/config.o $(SRC)/base/writer.o
	$(CC) $(ALL_CFLAGS) -o options_dump base/options_dump.c $(SRC)/base/config.o $(SRC)/base/writer.o

$(OPTIONS): options_dump
	mkdir -p ../priv
	./options_dump >$(OPTIONS).tmp
	mv $(OPTIONS).tmp $(OPTIONS)

$(OPTIONS_MD): options_dump
	mkdir -p ../priv
	./options_dump markdown >$(OPTIONS_MD).tmp
	mv $(OPTIONS_MD).tmp $(OPTIONS_MD)

# docs/configuration.md's table, between its two markers, replaced by the library's.
docs: $(OPTIONS_MD)
	awk -v table=$(OPTIONS_MD) '/^<!-- end of the options -->/ { skip = 0 } !skip { print } \
		/^<!-- the options:/ { while ((getline line <table) > 0) print line; skip = 1 }' \
		../docs/configuration.md >../docs/configuration.md.tmp
	mv ../docs/configuration.md.tmp ../docs/configuration.md

.SUFFIXES: .c .o
.c.o:
	$(CC) $(ALL_CFLAGS) -c $< -o $@

clean:
	rm -f $(OBJS) $(LIB) $(LIB).tmp options_dump $(OPTIONS) $(OPTIONS).tmp $(OPTIONS_MD) \
		$(OPTIONS_MD).tmp $(INJECT) $(INJECT).tmp

.PHONY: all clean docs
