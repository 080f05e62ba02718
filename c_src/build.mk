# The build proper, with the variables makevars.sh wrote. POSIX make syntax only.
include makevars.mk

WARN = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
# Frame pointers in the tracer's own frames keep the frame-pointer unwinding mode sound.
ALL_CFLAGS = -std=gnu11 -O2 -g -fPIC -fvisibility=hidden -fno-semantic-interposition \
	-fno-omit-frame-pointer $(WARN) $(ERL_CFLAGS) $(UNWIND_CFLAGS) $(DW_CFLAGS) $(CFLAGS)
OBJS = config.o mem.o proc.o table.o intern.o cfi.o beam_frames.o stack.o recorder.o hooks.o attach.o symbols.o \
	symbols_elf.o symbols_dwarf.o symbols_perf.o symbols_jit.o unload.o filter.o nif.o writer.o report.o csv.o \
	service.o api.o snapshot.o world.o reach.o roots.o layouts.o heap.o beam_heaps.o beam_alloc.o beam_regs.o beam_vm.o rules.o allocator.o nif_hooks.o
HDRS = allocator.h beam_alloc.h beam_regs.h beam_vm.h rules.h beam_frames.h beam_heaps.h cfi.h config.h filter.h heap.h nif_api.h hooklist.h hooks.h nif_hooks.h attach.h platform.h sort.h mem.h \
	proc.h snapshot.h world.h reach.h roots.h layouts.h table.h intern.h stack.h recorder.h symbols.h \
	symbols_backend.h account.h writer.h report.h csv.h \
	service.h
LIB = ../priv/mtrace.so
OPTIONS = ../priv/mtrace-options.txt
INJECT = ../priv/mtrace-inject

all: $(LIB) $(OPTIONS) $(INJECT)

# bin/mtrace attach, report and detach's injector: a program of its own, which links nothing of
# the library.
$(INJECT): inject.c
	mkdir -p ../priv
	$(CC) $(ALL_CFLAGS) -o $(INJECT).tmp inject.c
	mv $(INJECT).tmp $(INJECT)

# Linked to a temporary name and renamed: a process that has the old file mapped keeps it intact.
$(LIB): $(OBJS) mtrace.version
	mkdir -p ../priv
	$(CC) -shared -o $(LIB).tmp $(OBJS) -Wl,--version-script=mtrace.version -Wl,-z,defs \
		$(UNWIND_LIBS) $(IBERTY_LIBS) -llzma -lm -ldl -lpthread $(LDFLAGS)
	mv $(LIB).tmp $(LIB)

$(OBJS): $(HDRS) makevars.mk

# The variables, as the library declares them (config.h), for bin/mtrace --help and the tests.
$(OPTIONS): options_dump.c config.o writer.o
	mkdir -p ../priv
	$(CC) $(ALL_CFLAGS) -o options_dump options_dump.c config.o writer.o
	./options_dump >$(OPTIONS).tmp
	mv $(OPTIONS).tmp $(OPTIONS)

.SUFFIXES: .c .o
.c.o:
	$(CC) $(ALL_CFLAGS) -c $< -o $@

clean:
	rm -f $(OBJS) $(LIB) $(LIB).tmp options_dump $(OPTIONS) $(OPTIONS).tmp $(INJECT) $(INJECT).tmp

.PHONY: all clean
