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
INJECT = ../priv/mtrace-inject

all: $(LIB) $(OPTIONS) $(INJECT)

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

# The variables, as the library declares them (config.h), for bin/mtrace --help and the tests.
$(OPTIONS): base/options_dump.c $(SRC)/base/config.o $(SRC)/base/writer.o
	mkdir -p ../priv
	$(CC) $(ALL_CFLAGS) -o options_dump base/options_dump.c $(SRC)/base/config.o $(SRC)/base/writer.o
	./options_dump >$(OPTIONS).tmp
	mv $(OPTIONS).tmp $(OPTIONS)

.SUFFIXES: .c .o
.c.o:
	$(CC) $(ALL_CFLAGS) -c $< -o $@

clean:
	rm -f $(OBJS) $(LIB) $(LIB).tmp options_dump $(OPTIONS) $(OPTIONS).tmp $(INJECT) $(INJECT).tmp

.PHONY: all clean
