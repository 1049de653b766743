# gpuman - one plain Makefile.
#   make            build everything into build/
#   make demo       run the main job (a simulated 8-GPU workstation without a GPU)
#   make check      all tests: unit (cmocka), end-to-end (bats), Python, ASan/UBSan
#   make bench      benchmarks, printing ratios against peers and limits
#   make asan       the unit and end-to-end tests under ASan/UBSan
#   make install PREFIX=/usr/local DESTDIR=    (and make uninstall, same variables)

PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
LIBDIR  ?= $(PREFIX)/lib
# Private files (the NVML simulator): not on the linker's path.
PKGLIBDIR ?= $(PREFIX)/lib/gpuman
INCDIR  ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
MANDIR  ?= $(PREFIX)/share/man
# Debian's python3 reads /usr/lib/python3/dist-packages; for any other
# prefix `make install` also drops a gpuman.pth into that python's
# site-packages under the prefix, if it has one (/usr/local/lib/python3.X/
# dist-packages on Debian), so `import gpuman` works without PYTHONPATH.
PYDIR   ?= $(PREFIX)/lib/python3/dist-packages
# Debian's own python3 first: the one `import gpuman` must work with.
PYTHON  ?= $(firstword $(wildcard /usr/bin/python3) python3)
DESTDIR ?=
BUILD   ?= build
comma   := ,

CC      ?= cc
empty   :=
space   := $(empty) $(empty)
CFLAGS  ?= -O2 -g
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wwrite-strings
ifeq ($(WERROR),1)
WARN    += -Werror
endif
DATADIR ?= $(PREFIX)/share/gpuman
# Every program sees include/ (the public gpuman.h); each folder adds what it
# may see beyond it: engine/ and the unit tests lib/'s private headers, the
# commands (cli/, serve/, and cmdline/, the command line both share) only
# lib/internal/gpuman-internal.h, which names what they still need of the
# library's insides and why.
CPPFLAGS += -Iinclude -D_GNU_SOURCE -DGM_PKGLIBDIR='"$(PKGLIBDIR)"' -DGM_DATADIR='"$(DATADIR)"'
ALL_CFLAGS = -std=c11 $(WARN) $(CFLAGS) $(SANITIZE)
LIBS    := -ljansson -linih -ldl -lpthread

# engine/ is the dispatch engine of batch and the queue, its job store
# (SQLite) and the protocol its runners share with it and with `run`: a
# module of its own, built into its own archive for gpuman, the runner and
# the unit tests, so that the public libgpuman.so, which no gm_* function
# needs it for, does not pull in SQLite.  The commands see it through
# engine.h, queue.h (the queue directory) and protocol.h only; the runner
# links just the protocol's objects from the archive.
ENGINE_SRC := $(sort $(wildcard engine/*.c))
ENGINE_PUBLIC := engine/engine.h engine/jobstore.h engine/outcome.h engine/protocol.h engine/queue.h
LIB_SRC := $(sort $(wildcard lib/*.c))
CLI_SRC := $(sort $(wildcard cli/*.c))
# What gpuman's commands and gpuman-serve share of the command line.
CMDLINE_SRC := $(sort $(wildcard cmdline/*.c))
SIM_COMMON := sim/scenario.c sim/scenario_load.c sim/scenario_gpu.c sim/scenario_timeline.c \
	sim/simstate.c
# Driver branches the simulator is built as, oldest first; the last is the
# default library, build/sim/libnvidia-ml.so.1 (a link to its r580/ copy).
SIM_BRANCHES := 390 470 535 580
SIM_NEWEST := $(lastword $(SIM_BRANCHES))
SIM_OLDER := $(filter-out $(SIM_NEWEST),$(SIM_BRANCHES))
SIM_LIBS := $(SIM_BRANCHES:%=$(BUILD)/sim/r%/libnvidia-ml.so.1) $(BUILD)/sim/libnvidia-ml.so.1
# The simulator library: the modelled functions and a generated weak stub for
# every other function of NVML's list.
SIM_LIB_OBJ := $(BUILD)/sim/nvml_sim.o $(BUILD)/sim/nvml_device.o $(BUILD)/sim/nvml_procs.o \
	$(BUILD)/sim/nvml_monitor.o $(BUILD)/sim/nvml_mig.o $(BUILD)/sim/stubs.o \
	$(SIM_COMMON:%.c=$(BUILD)/%.o) $(BUILD)/sim/spell.o
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
CMDLINE_OBJ := $(CMDLINE_SRC:%.c=$(BUILD)/%.o)
SERVE_SRC := $(sort $(wildcard serve/*.c))
SERVE_OBJ := $(SERVE_SRC:%.c=$(BUILD)/%.o)
BROKER_SRC := $(sort $(wildcard broker/*.c))
BROKER_OBJ := $(BROKER_SRC:%.c=$(BUILD)/%.o)
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
EXAMPLE_SRC := $(sort $(wildcard examples/*.c))
EXAMPLE_BIN := $(EXAMPLE_SRC:examples/%.c=$(BUILD)/examples/%)

PROGRAMS := $(BUILD)/gpuman $(BUILD)/gpuman-serve $(BUILD)/gpuman-broker $(BUILD)/gpuman-runner $(BUILD)/gpuman-simload $(BUILD)/libgpuman.so \
	    $(SIM_LIBS) $(EXAMPLE_BIN)

.PHONY: all deps check-deps demo check unit e2e python asan asan-tests bench install uninstall man deb check-deb clean format format-check clients cudaload
all: deps $(PROGRAMS)

deps:
	@CC="$(CC)" sh scripts/ensure-deps
check-deps:
	@CC="$(CC)" sh scripts/ensure-deps check

# Library objects are position independent so that one set serves the
# static archive (CLI, tests) and the shared library (Python, C users).
# context.c picks the simulator library of a scenario's driver branch.
$(BUILD)/lib/context.o: CPPFLAGS += -DGM_SIM_BRANCHES='$(subst $(space),$(comma),$(SIM_BRANCHES))'
$(BUILD)/lib/%.o: lib/%.c $(wildcard lib/*.h) include/gpuman.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -DGM_BUILDING_LIB -fPIC -fvisibility=hidden $(ALL_CFLAGS) -c -o $@ $<
$(BUILD)/engine/%.o: engine/%.c $(wildcard engine/*.h) $(wildcard lib/*.h) include/gpuman.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Iengine -Ilib $(ALL_CFLAGS) -c -o $@ $<
$(BUILD)/cli/%.o: cli/%.c $(wildcard cli/*.h) $(wildcard cmdline/*.h) $(ENGINE_PUBLIC) \
		lib/internal/gpuman-internal.h $(wildcard lib/*.h) include/gpuman.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Icmdline -Iengine -Ilib/internal $(ALL_CFLAGS) -c -o $@ $<
$(BUILD)/cmdline/%.o: cmdline/%.c $(wildcard cmdline/*.h) lib/internal/gpuman-internal.h \
		$(wildcard lib/*.h) include/gpuman.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Ilib/internal $(ALL_CFLAGS) -c -o $@ $<
# The simulator is never sanitized: it stands for the driver, and it is
# loaded by programs (Python's ctypes) that carry no sanitizer runtime.
SIM_CFLAGS = -std=c11 $(WARN) $(CFLAGS)
$(BUILD)/sim/%.o: sim/%.c $(wildcard sim/*.h)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -fPIC -fvisibility=hidden $(SIM_CFLAGS) -c -o $@ $<

# The scenario reader's "did you mean" is the command line's (lib/spell.c),
# built here like the rest of the simulator, never sanitized.
$(BUILD)/sim/spell.o: lib/spell.c lib/spell.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -fPIC -fvisibility=hidden $(SIM_CFLAGS) -c -o $@ $<

$(BUILD)/sim/stubs.c: sim/gen-stubs.sh sim/nvml-functions.txt
	@mkdir -p $(@D)
	sh sim/gen-stubs.sh sim/nvml-functions.txt >$@.tmp && mv $@.tmp $@
$(BUILD)/sim/stubs.o: $(BUILD)/sim/stubs.c
	$(CC) -fPIC -fvisibility=hidden $(SIM_CFLAGS) -Wno-missing-prototypes -c -o $@ $<

$(BUILD)/libgpuman.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/libgmengine.a: $(ENGINE_OBJ)
	@rm -f $@
	ar rcs $@ $^
# The soname's number changes whenever a program built against the old
# library could break: 1 since the snapshot's layouts, which 0.1.0's
# gpuman.h published, grew (lib/snapshot_types.h).  debian/ names the
# library package after it (libgpuman$(SOMAJOR)).
SOMAJOR := 1
SONAME  := libgpuman.so.$(SOMAJOR)
# Relinked when the Makefile changes: what goes into it is decided here.
$(BUILD)/libgpuman.so: $(LIB_OBJ) Makefile
	$(CC) -shared -Wl,-soname,$(SONAME) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $(LIB_OBJ) $(LIBS)
	ln -sf libgpuman.so $(BUILD)/$(SONAME)
# SQLite is linked into the command statically: loading and relocating the
# shared library cost every gpuman process 0.3-0.5 ms, a third of `pick`,
# which never touches the job store.  The Debian package links it
# dynamically (STATIC_SQLITE=0) so that SQLite's security updates reach it.
# ncurses goes the same way: only `top` uses it, no other command should pay
# for loading it.
STATIC_SQLITE ?= 1
# libinih (gpuman.conf) likewise: every command that leases reads it.  And
# jansson: its loading cost each command 0.05-0.07 ms of the 1.3-1.6 ms a
# `gpuman --version` or a `pick` through the broker takes on the 2-core VM
# (alternating runs, 2026-11-29).
CLI_LIBS = $(if $(filter 1,$(STATIC_SQLITE)),-Wl$(comma)-Bstatic -lsqlite3 -lncursesw -ltinfo -linih -ljansson \
	-Wl$(comma)-Bdynamic,-lsqlite3 -lncursesw -ltinfo -linih -ljansson) -ldl -lpthread -lm
# Under the sanitizers (make asan, make check), the programs the end-to-end
# suite starts thousands of times link the sanitizer runtimes in, without
# PIE: a sanitized command then starts about a third faster on the 2-core
# VM (`gpuman --version` 30 -> 18 ms, 1190 -> 780 page faults: no relocation
# of the instrumented globals, no lookup of each interceptor).  Programs
# that load the sanitized libgpuman.so keep the shared runtimes: one
# runtime per process.  (gcc's flags; clang links them in by default.)
SAN_EXE = $(if $(SANITIZE),-no-pie $(if $(findstring clang,$(CC)),,-static-libasan -static-libubsan))
$(BUILD)/gpuman: $(CLI_OBJ) $(CMDLINE_OBJ) $(BUILD)/libgmengine.a $(BUILD)/libgpuman.a Makefile
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $(SAN_EXE) -o $@ $(CLI_OBJ) $(CMDLINE_OBJ) $(BUILD)/libgmengine.a \
		$(BUILD)/libgpuman.a $(CLI_LIBS)

# The HTTP server behind `gpuman serve`, a program of its own: libmicrohttpd
# pulls in GnuTLS and p11-kit, whose loading would cost every gpuman command
# about 10 ms.  Its page is compiled in (.incbin), so its object depends on it.
$(BUILD)/serve/%.o: serve/%.c serve/serve.h $(wildcard cmdline/*.h) $(ENGINE_PUBLIC) \
		lib/internal/gpuman-internal.h $(wildcard lib/*.h) include/gpuman.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Icmdline -Iengine -Ilib/internal $(ALL_CFLAGS) -c -o $@ $<
$(BUILD)/serve/page.o: serve/page.html
# It reads the queue of the user it runs as (engine/queue.c, the job store):
# SQLite as the command has it; libinih for gpuman.conf (the registry).
# Of gpuman's own code it takes the command line only (cmdline/).
SERVE_LIBS = $(if $(filter 1,$(STATIC_SQLITE)),-Wl$(comma)-Bstatic -lsqlite3 -linih -Wl$(comma)-Bdynamic,-lsqlite3 -linih) \
	-ljansson -lmicrohttpd -ldl -lpthread -lm
$(BUILD)/gpuman-serve: $(SERVE_OBJ) $(CMDLINE_OBJ) $(BUILD)/libgmengine.a $(BUILD)/libgpuman.a
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $(SAN_EXE) -o $@ $^ $(SERVE_LIBS)

# The lease broker behind `gpuman daemon`, root's server: a program of its
# own, in its own folder, so that the commands users run carry none of it.
$(BUILD)/broker/%.o: broker/%.c $(wildcard broker/*.h) $(wildcard cmdline/*.h) $(ENGINE_PUBLIC) \
		lib/internal/gpuman-internal.h $(wildcard lib/*.h) include/gpuman.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Icmdline -Iengine -Ilib/internal $(ALL_CFLAGS) -c -o $@ $<
BROKER_LIBS = $(if $(filter 1,$(STATIC_SQLITE)),-Wl$(comma)-Bstatic -linih -Wl$(comma)-Bdynamic,-linih) \
	-ljansson -ldl -lpthread -lm
$(BUILD)/gpuman-broker: $(BROKER_OBJ) $(CMDLINE_OBJ) $(BUILD)/libgmengine.a $(BUILD)/libgpuman.a
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $(SAN_EXE) -o $@ $^ $(BROKER_LIBS)

# The supervisor of each batch task and queued job, started by the
# dispatcher: static, so that starting it costs no dynamic linking (it is
# started once per task); under the sanitizers, SAN_EXE (a sanitized
# program cannot be wholly static).
RUNNER_LDFLAGS = $(if $(SANITIZE),$(SAN_EXE),-static)
# Of the library it takes proctree.o only (jobtree.c reads parents with it).
$(BUILD)/gpuman-runner: runner/gpuman-runner.c engine/protocol.h $(BUILD)/libgmengine.a $(BUILD)/libgpuman.a
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Iengine $(ALL_CFLAGS) $(LDFLAGS) $(RUNNER_LDFLAGS) -o $@ $< $(BUILD)/libgmengine.a \
		$(BUILD)/libgpuman.a

# The simulator is installed under the driver's soname so that any NVML
# client (nvidia-smi excepted) can be pointed at it with LD_LIBRARY_PATH.
# One library per driver branch: the same objects, a different branch.o and
# a version script exporting exactly that branch's functions, so that dlsym
# really finds no nvmlDeviceGetNumGpuCores in the r470 library.
$(BUILD)/sim/r%/branch.o: sim/branch.c sim/nvml_sim.h sim/scenario.h sim/simstate.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -fPIC -fvisibility=hidden $(SIM_CFLAGS) -DSIM_BRANCH=$* \
		-DSIM_BRANCHES='$(subst $(space),$(comma),$(SIM_BRANCHES))' -c -o $@ $<
$(BUILD)/sim/r%/exports.map: sim/gen-map.sh sim/driver-branches.txt sim/nvml-functions.txt
	@mkdir -p $(@D)
	sh sim/gen-map.sh $* $(SIM_NEWEST) >$@.tmp && mv $@.tmp $@
$(BUILD)/sim/r%/libnvidia-ml.so.1: $(SIM_LIB_OBJ) $(BUILD)/sim/r%/branch.o $(BUILD)/sim/r%/exports.map
	$(CC) -shared -Wl,-soname,libnvidia-ml.so.1 -Wl,--version-script=$(BUILD)/sim/r$*/exports.map \
		$(SIM_CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) -ljansson
	ln -sf libnvidia-ml.so.1 $(@D)/libnvidia-ml.so
# Kept: make would otherwise delete them as intermediates and relink.
.SECONDARY: $(SIM_BRANCHES:%=$(BUILD)/sim/r%/branch.o) $(SIM_BRANCHES:%=$(BUILD)/sim/r%/exports.map) \
	$(SIM_LIB_OBJ)
$(BUILD)/sim/libnvidia-ml.so.1: $(BUILD)/sim/r$(SIM_NEWEST)/libnvidia-ml.so.1
	ln -sf r$(SIM_NEWEST)/libnvidia-ml.so.1 $@
	ln -sf libnvidia-ml.so.1 $(BUILD)/sim/libnvidia-ml.so
$(BUILD)/gpuman-simload: $(BUILD)/sim/simload.o $(SIM_COMMON:%.c=$(BUILD)/%.o) $(BUILD)/sim/spell.o
	$(CC) $(SIM_CFLAGS) $(LDFLAGS) -o $@ $^ -ljansson

$(BUILD)/examples/%: examples/%.c $(BUILD)/libgpuman.so include/gpuman.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< -L$(BUILD) -l:libgpuman.so -Wl,-rpath,'$$ORIGIN/..'

$(BUILD)/tests/test_%: tests/unit/test_%.c $(BUILD)/libgmengine.a $(BUILD)/libgpuman.a tests/unit/*.h \
                    $(wildcard lib/*.h lib/internal/*.h sim/*.h) include/gpuman.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Iengine -Ilib $(ALL_CFLAGS) -o $@ $< $(filter %.o,$^) $(BUILD)/libgmengine.a \
		$(BUILD)/libgpuman.a $(LIBS) -lsqlite3 -lcmocka -lpthread
# The broker's worker thread, tested on its own (the rest of the broker is
# tested as a server by the end-to-end tests).
$(BUILD)/tests/test_worker: $(BUILD)/broker/worker.o broker/daemon.h
$(BUILD)/tests/test_worker: CPPFLAGS += -Icmdline -Ilib/internal

demo: all
	@sh examples/demo.sh $(BUILD)

unit: check-deps all $(UNIT_BIN)
	@sh tests/run-unit $(BUILD) $(UNIT_BIN)
e2e: check-deps all
	@GM_BUILD=$(abspath $(BUILD)) bats --tap --print-output-on-failure tests/e2e
python: check-deps all
	@GM_BUILD=$(abspath $(BUILD)) PYTHONPATH=python python3 -m unittest discover -s tests/python -t . -v

# NVML clients we did not write, built against nothing of ours, to be run
# on the simulator by tests/e2e/clients.bats (the Rust nvml-wrapper crate).
clients: $(BUILD)/clients/nvmlw-probe
$(BUILD)/clients/nvmlw-probe: tests/clients/build-nvml-wrapper tests/clients/nvml-wrapper/Cargo.toml \
		tests/clients/nvml-wrapper/src/main.rs tests/clients/nvml-wrapper/.cargo/config.toml
	@sh tests/clients/build-nvml-wrapper $(BUILD)

# Everything, with one closing line that counts the suites.  The build
# takes every core, once the packages it needs are in (check-deps first:
# under -j, all's own deps would race the compiler).
JOBS := $(shell nproc 2>/dev/null || echo 2)
check: check-deps
	@$(MAKE) --no-print-directory -j$(JOBS) all $(UNIT_BIN) man clients
	@sh tests/run-all $(BUILD)

# As in tests/run-all: run.bats's bursts launch 200 waiters at once (40
# still collide), and each sanitized waiter kept up to 256 MiB of freed
# memory in ASan's quarantine while it re-read the line every second: 200 of
# them exhausted this 24 GiB machine.  Leaks are sought in the unit tests
# and in the end-to-end tests' brokers, not at each short command's exit.
ASAN_MAKE := $(MAKE) --no-print-directory BUILD=build-asan \
	CFLAGS="-O1 -g -fno-omit-frame-pointer" \
	SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
ASAN_E2E_ENV := ASAN_OPTIONS=detect_leaks=0:quarantine_size_mb=16 GM_BURST=40 GM_ROUNDS=5 \
	GM_DAEMON_ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=16
asan: check-deps
	@ASAN_OPTIONS=detect_leaks=1 $(ASAN_MAKE) all unit
	@$(ASAN_E2E_ENV) $(ASAN_MAKE) e2e
asan-tests: $(UNIT_BIN)

BENCH_BIN := $(BUILD)/bench/runtime $(BUILD)/bench/inproc $(BUILD)/bench/httpload
$(BUILD)/bench/httpload: bench/httpload.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< -lpthread
$(BUILD)/bench/runtime: bench/runtime.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $<
$(BUILD)/bench/inproc: bench/inproc.c $(BUILD)/libgpuman.so include/gpuman.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< -L$(BUILD) -l:libgpuman.so -Wl,-rpath,'$$ORIGIN/..'

# The real-GPU twin of gpuman-simload (sim/cudaload.cu), built by
# `make cudaload` only where nvcc exists (not part of `all`: no test here
# can run it without a GPU); tests/real-gpu/check.sh builds and runs it.
NVCC ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
cudaload: $(if $(NVCC),$(BUILD)/gpuman-cudaload)
	@$(if $(NVCC),:,echo "cudaload: no nvcc here; gpuman-cudaload not built")
$(BUILD)/gpuman-cudaload: sim/cudaload.cu
	@mkdir -p $(@D)
	$(NVCC) -O2 -o $@ $<

bench: all $(BENCH_BIN)
	@sh bench/run $(abspath $(BUILD))

# Man pages, made by scripts/mkman from their sources in docs/ (Markdown,
# NAME.SECTION.md) and, for libgpuman(3)'s API, from gpuman.h.
# tests/e2e/man.bats holds each command's page to its --help.
$(BUILD)/man/gpuman.1: $(wildcard docs/*.md) scripts/mkman include/gpuman.h
	@rm -rf $(BUILD)/man
	sh scripts/mkman $(BUILD)/man
	@# gpuman-broker is `gpuman daemon`: its page is that command's
	echo '.so man1/gpuman-daemon.1' >$(BUILD)/man/gpuman-broker.1
man: $(BUILD)/man/gpuman.1

BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/vendor-completions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d

# The site-packages directory under PREFIX where this python looks, if any
# and if PYDIR is not already on its path: where gpuman.pth goes.
PTHDIR = $(shell $(PYTHON) -c 'import site; s=site.getsitepackages(); d=[p for p in s if p.startswith("$(PREFIX)/")]; print("" if "$(PYDIR)" in s or not d else d[0])' 2>/dev/null)

# The .pc names PREFIX, LIBDIR and INCDIR: remade whenever one of them
# differs from the last make's (a second `make install PREFIX=...` must not
# install a .pc that points at the first prefix).
PC_VARS := $(PREFIX) $(LIBDIR) $(INCDIR)
$(BUILD)/gpuman.pc.vars: FORCE
	@mkdir -p $(@D)
	@echo '$(PC_VARS)' | cmp -s - $@ || echo '$(PC_VARS)' >$@
.PHONY: FORCE
FORCE:
$(BUILD)/gpuman.pc: gpuman.pc.in include/gpuman.h $(BUILD)/gpuman.pc.vars
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCDIR@|$(INCDIR)|' \
	    -e "s|@VERSION@|$$(sed -n 's/^#define GM_VERSION_STRING "\(.*\)"/\1/p' include/gpuman.h)|" $< >$@

# Paths are not baked into the programs: gpuman finds its runner, the
# simulator and the examples relative to itself (../lib/gpuman,
# ../share/gpuman), so DESTDIR and a later move both work.
install: all $(BUILD)/gpuman.pc man
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGLIBDIR) $(DESTDIR)$(INCDIR) \
		$(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(PYDIR)/gpuman $(DESTDIR)$(DATADIR)/examples \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man5 \
		$(DESTDIR)$(MANDIR)/man7 $(DESTDIR)$(BASHCOMPDIR) \
		$(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	install -m 755 $(BUILD)/gpuman $(BUILD)/gpuman-serve $(BUILD)/gpuman-broker $(BUILD)/gpuman-runner $(BUILD)/gpuman-simload $(DESTDIR)$(BINDIR)/
	install -m 644 $(BUILD)/libgpuman.so $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libgpuman.so
	install -m 644 $(BUILD)/sim/libnvidia-ml.so.1 $(DESTDIR)$(PKGLIBDIR)/libnvidia-ml.so.1
	for b in $(SIM_OLDER); do \
		install -d $(DESTDIR)$(PKGLIBDIR)/r$$b && \
		install -m 644 $(BUILD)/sim/r$$b/libnvidia-ml.so.1 $(DESTDIR)$(PKGLIBDIR)/r$$b/ || exit 1; \
	done
	install -m 644 include/gpuman.h $(DESTDIR)$(INCDIR)/
	install -m 644 $(BUILD)/gpuman.pc $(DESTDIR)$(PKGCONFIGDIR)/
	install -m 644 python/gpuman/*.py $(DESTDIR)$(PYDIR)/gpuman/
	install -m 644 examples/*.json examples/*.txt $(DESTDIR)$(DATADIR)/examples/
	install -m 644 $(BUILD)/man/*.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(BUILD)/man/*.3 $(DESTDIR)$(MANDIR)/man3/
	install -m 644 $(BUILD)/man/*.5 $(DESTDIR)$(MANDIR)/man5/
	install -m 644 $(BUILD)/man/*.7 $(DESTDIR)$(MANDIR)/man7/
	install -m 644 contrib/completion/gpuman.bash $(DESTDIR)$(BASHCOMPDIR)/gpuman
	install -m 644 contrib/completion/_gpuman $(DESTDIR)$(ZSHCOMPDIR)/_gpuman
	install -m 644 contrib/completion/gpuman.fish $(DESTDIR)$(FISHCOMPDIR)/gpuman.fish
	@if [ -n "$(PTHDIR)" ]; then \
		echo "install -d $(DESTDIR)$(PTHDIR) && echo $(PYDIR) > $(DESTDIR)$(PTHDIR)/gpuman.pth"; \
		install -d $(DESTDIR)$(PTHDIR) && echo "$(PYDIR)" >$(DESTDIR)$(PTHDIR)/gpuman.pth; \
	elif ! $(PYTHON) -c 'import site; exit("$(PYDIR)" not in site.getsitepackages())' 2>/dev/null; then \
		echo "note: $(PYTHON) does not look in $(PYDIR): use PYTHONPATH=$(PYDIR)"; fi
	@# The new library into the loader's cache, as a package's postinst does;
	@# not for a DESTDIR (a staging tree) or a user without the right to.
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then \
		echo ldconfig; PATH="$$PATH:/sbin:/usr/sbin" ldconfig; fi

# Exactly what install put there; directories only if left empty.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/gpuman $(DESTDIR)$(BINDIR)/gpuman-serve $(DESTDIR)$(BINDIR)/gpuman-runner \
	      $(DESTDIR)$(BINDIR)/gpuman-simload $(DESTDIR)$(BINDIR)/gpuman-broker \
	      $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libgpuman.so \
	      $(DESTDIR)$(PKGLIBDIR)/libnvidia-ml.so.1 $(DESTDIR)$(INCDIR)/gpuman.h \
	      $(DESTDIR)$(PKGCONFIGDIR)/gpuman.pc
	rm -rf $(DESTDIR)$(PYDIR)/gpuman $(DESTDIR)$(DATADIR) $(SIM_OLDER:%=$(DESTDIR)$(PKGLIBDIR)/r%)
	rm -f $(DESTDIR)$(MANDIR)/man1/gpuman.1 $(DESTDIR)$(MANDIR)/man1/gpuman-*.1 \
	      $(DESTDIR)$(MANDIR)/man3/libgpuman.3 $(DESTDIR)$(MANDIR)/man3/gpuman-python.3 \
	      $(DESTDIR)$(MANDIR)/man5/gpuman.conf.5 $(DESTDIR)$(MANDIR)/man5/gpuman-scenario.5 \
	      $(DESTDIR)$(MANDIR)/man7/gpuman-trust.7 $(DESTDIR)$(BASHCOMPDIR)/gpuman \
	      $(DESTDIR)$(ZSHCOMPDIR)/_gpuman $(DESTDIR)$(FISHCOMPDIR)/gpuman.fish
	[ -z "$(PTHDIR)" ] || rm -f $(DESTDIR)$(PTHDIR)/gpuman.pth
	-rmdir $(DESTDIR)$(PKGLIBDIR) 2>/dev/null

# Debian packages into $(BUILD)/deb (scripts/mkdeb), then lintian's verdict;
# check-deb also installs them into a fresh Debian (scripts/check-deb).
deb:
	sh scripts/mkdeb $(abspath $(BUILD))/deb
	lintian --info $(BUILD)/deb/*.changes || true
check-deb: deb
	sh scripts/check-deb $(abspath $(BUILD))/deb

FORMAT_SRC = $(wildcard include/*.h lib/*.[ch] engine/*.[ch] cli/*.[ch] cmdline/*.[ch] serve/*.[ch] broker/*.[ch] \
	     runner/*.c sim/*.[ch] \
	     tests/unit/*.[ch] examples/*.c)
format:
	clang-format -i $(FORMAT_SRC)
# make check's verdict on the house format, as a TAP line (tests/run-all).
format-check:
	@if clang-format --dry-run -Werror $(FORMAT_SRC) 2>$(BUILD)/format.log; then \
		echo "ok 1 - every C file is as .clang-format says"; \
	else \
		echo "not ok 1 - C files differ from .clang-format: run 'make format' (first lines below)"; \
		grep -m 10 'error:' $(BUILD)/format.log | sed 's/^/# /'; \
	fi

clean:
	rm -rf build build-asan
