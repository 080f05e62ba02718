# The library's sources by layer: the one list that build.mk and test/c/Makefile include. SRC is
# c_src as the includer sees it. POSIX make syntax only.

# The platform's facts, the options, mtrace's own memory, /proc, text output.
BASE = $(SRC)/base/config.o $(SRC)/base/mem.o $(SRC)/base/proc.o $(SRC)/base/writer.o
# The recorder, which the hooks call and which is tested without them.
RECORDER = $(SRC)/record/table.o $(SRC)/record/intern.o $(SRC)/record/cfi.o \
	$(SRC)/record/beam_frames.o $(SRC)/record/stack.o $(SRC)/record/recorder.o
# The allocator the hooks forward to, and where the loader binds the malloc family's names.
ALLOCATOR = $(SRC)/record/allocator.o $(SRC)/record/bindings.o
# The hook path: the recorder, the malloc family's hooks, the allocator's own API's, and the
# allocator they forward to.
RECORD = $(RECORDER) $(SRC)/record/hooks.o $(SRC)/record/extended.o $(ALLOCATOR)
# Recording without a restart (and dlopen as its caller's), an object loaded past the preload,
# and what an object's unloading ends.
ATTACH = $(SRC)/attach/attach.o $(SRC)/attach/dlopen_as.o $(SRC)/attach/load.o \
	$(SRC)/attach/unload.o
SYMBOLS = $(SRC)/symbols/symbols.o $(SRC)/symbols/elf.o $(SRC)/symbols/dwarf.o \
	$(SRC)/symbols/perf.o $(SRC)/symbols/jit.o
# Which blocks are lost: the snapshot, the stopped world, the mark and its rules.
MARK = $(SRC)/mark/snapshot.o $(SRC)/mark/world.o $(SRC)/mark/reach.o $(SRC)/mark/roots.o \
	$(SRC)/mark/remember.o $(SRC)/mark/scrub.o $(SRC)/mark/stacks.o $(SRC)/mark/verdict.o \
	$(SRC)/mark/layouts.o $(SRC)/mark/glibc_heap.o $(SRC)/mark/beam_heaps.o \
	$(SRC)/mark/beam_alloc.o $(SRC)/mark/beam_regs.o $(SRC)/mark/beam_vm.o $(SRC)/mark/rules.o
# Reports, CSV, when they happen, and the C API.
OUT = $(SRC)/out/report.o $(SRC)/out/csv.o $(SRC)/out/service.o $(SRC)/out/api.o
# The NIF and the NIF API's hooks.
NIF = $(SRC)/nif/nif.o $(SRC)/nif/terms.o $(SRC)/nif/live.o $(SRC)/nif/lost.o $(SRC)/nif/state.o \
      $(SRC)/nif/scrub.o $(SRC)/nif/filter.o $(SRC)/nif/nif_hooks.o
OBJS = $(BASE) $(RECORD) $(ATTACH) $(SYMBOLS) $(MARK) $(OUT) $(NIF)

HDRS = $(SRC)/base/config.h $(SRC)/base/mem.h $(SRC)/base/platform.h $(SRC)/base/proc.h \
	$(SRC)/base/sort.h $(SRC)/base/writer.h \
	$(SRC)/record/account.h $(SRC)/record/allocator.h $(SRC)/record/beam_frames.h \
	$(SRC)/record/bindings.h \
	$(SRC)/record/cfi.h $(SRC)/record/extended.h $(SRC)/record/hooklist.h $(SRC)/record/hooks.h $(SRC)/record/intern.h \
	$(SRC)/record/recorder.h $(SRC)/record/stack.h $(SRC)/record/table.h \
	$(SRC)/attach/attach.h $(SRC)/attach/dlopen_as.h \
	$(SRC)/symbols/symbols.h $(SRC)/symbols/backend.h \
	$(SRC)/mark/beam_alloc.h $(SRC)/mark/beam_heaps.h $(SRC)/mark/beam_regs.h \
	$(SRC)/mark/beam_vm.h $(SRC)/mark/glibc_heap.h $(SRC)/mark/layouts.h $(SRC)/mark/reach.h \
	$(SRC)/mark/remember.h $(SRC)/mark/roots.h $(SRC)/mark/rules.h $(SRC)/mark/scrub.h \
	$(SRC)/mark/snapshot.h $(SRC)/mark/world.h \
	$(SRC)/out/csv.h $(SRC)/out/report.h $(SRC)/out/service.h \
	$(SRC)/nif/filter.h $(SRC)/nif/nif_api.h $(SRC)/nif/nif_hooks.h $(SRC)/nif/readers.h \
	$(SRC)/nif/terms.h
