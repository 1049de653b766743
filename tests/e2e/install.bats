#!/usr/bin/env bats
# install: `make install` into a DESTDIR and a private PREFIX, then the
# installed gpuman, Python package and pkg-config file used from there, and
# `make uninstall` taking back exactly what was installed.

load helpers

# inst PREFIX [DESTDIR] - install the tested build there.  -o all: use the
# build as it is (a sanitized one stays sanitized), do not rebuild it.
inst() {
	make --no-print-directory -C "$GM_ROOT" -o all BUILD="$GM_BUILD" PREFIX="$1" DESTDIR="${2:-}" install
}

sanitized() { ldd "$GM_BUILD/libgpuman.so" | grep -q libasan; }

@test "make install DESTDIR PREFIX=/usr: the installed gpuman finds its simulator, examples and runner" {
	d=$BATS_TEST_TMPDIR/root
	run -0 inst /usr "$d"
	for f in usr/bin/gpuman usr/bin/gpuman-broker usr/bin/gpuman-runner usr/bin/gpuman-simload usr/lib/libgpuman.so.1 \
		usr/lib/gpuman/libnvidia-ml.so.1 usr/include/gpuman.h usr/lib/pkgconfig/gpuman.pc \
		usr/lib/python3/dist-packages/gpuman/__init__.py usr/share/gpuman/examples/lab-8gpu.json \
		usr/share/man/man1/gpuman.1 usr/share/man/man1/gpuman-run.1 usr/share/man/man3/libgpuman.3 \
		usr/share/bash-completion/completions/gpuman usr/share/zsh/vendor-completions/_gpuman \
		usr/share/fish/vendor_completions.d/gpuman.fish; do
		[ -f "$d/$f" ] || { echo "missing $f"; false; }
	done
	run -0 env MANPATH="$d/usr/share/man" man -w gpuman
	[ "$output" = "$d/usr/share/man/man1/gpuman.1" ]
	# The hint names the scenario next to this installation, not /usr/local.
	cd "$BATS_TEST_TMPDIR"
	GPUMAN_NVML=$BATS_TEST_TMPDIR/none run -1 "$d/usr/bin/gpuman" status
	[[ "$output" == *"gpuman --sim $d/usr/share/gpuman/examples/lab-8gpu.json status"* ]]
	export PATH="$d/usr/bin:/usr/bin:/bin"
	run -0 gpuman --sim "$d/usr/share/gpuman/examples/lab-8gpu.json" status
	[[ "$output" == *"8 GPUs"* ]]
	export GPUMAN_SIM=$d/usr/share/gpuman/examples/lab-8gpu.json
	run -0 gpuman run -- sh -c 'echo "$GPUMAN_GPUS"'
	[ "$output" = 2 ]
	# The queue: the dispatcher and runner are the installed ones.
	run -0 gpuman submit -- sh -c 'echo "$GPUMAN_JOB"'
	run -0 gpuman wait "$output"
}

@test "make install: Python imports it with the installed path; pkg-config builds a C program" {
	d=$BATS_TEST_TMPDIR/root
	run -0 inst /usr "$d"
	PYTHONPATH=$d/usr/lib/python3/dist-packages run -0 python3 -c 'import gpuman; print(gpuman.__file__)'
	[ "$output" = "$d/usr/lib/python3/dist-packages/gpuman/__init__.py" ]
	if ! sanitized; then # python3 carries no sanitizer runtime to load it
		GPUMAN_SIM=$GM_ROOT/examples/lab-8gpu.json PYTHONPATH=$d/usr/lib/python3/dist-packages \
			run -0 python3 -c 'import gpuman; print(len(gpuman.devices()))'
		[ "$output" = 8 ]
	fi
	cat >"$BATS_TEST_TMPDIR/v.c" <<'C'
#include <stdio.h>
#include <gpuman.h>
int main(void) { printf("%s\n", gm_version()); return 0; }
C
	flags=$(PKG_CONFIG_SYSROOT_DIR=$d PKG_CONFIG_PATH=$d/usr/lib/pkgconfig pkg-config --cflags --libs gpuman)
	[[ "$flags" == *"-I$d/usr/include"* ]]
	cc -o "$BATS_TEST_TMPDIR/v" "$BATS_TEST_TMPDIR/v.c" $flags
	# It needs the soname, which the link -lgpuman names the library.
	run -0 readelf -d "$BATS_TEST_TMPDIR/v"
	[[ "$output" == *"Shared library: [libgpuman.so.1]"* ]]
	[ "$(readlink "$d/usr/lib/libgpuman.so")" = libgpuman.so.1 ]
	ASAN_OPTIONS=verify_asan_link_order=0 LD_LIBRARY_PATH=$d/usr/lib run -0 "$BATS_TEST_TMPDIR/v"
	[ "$output" = "$(PKG_CONFIG_PATH=$d/usr/lib/pkgconfig pkg-config --modversion gpuman)" ]
}

@test "make uninstall takes back every file; a private PREFIX works without DESTDIR" {
	d=$BATS_TEST_TMPDIR/root
	run -0 inst /usr "$d"
	make --no-print-directory -C "$GM_ROOT" BUILD="$GM_BUILD" PREFIX=/usr DESTDIR="$d" uninstall
	run -0 find "$d" -type f -o -type l
	[ -z "$output" ]
	p=$BATS_TEST_TMPDIR/prefix
	run -0 inst "$p"
	[[ "$output" == *"use PYTHONPATH=$p/lib/python3/dist-packages"* ]]
	run -0 "$p/bin/gpuman" --sim "$p/share/gpuman/examples/lab-8gpu.json" pick
	[ "$output" = 2 ]
	make --no-print-directory -C "$GM_ROOT" BUILD="$GM_BUILD" PREFIX="$p" uninstall
	run -0 find "$p" -type f -o -type l
	[ -z "$output" ]
}

@test "a second make install with another PREFIX installs a .pc of that prefix; ldconfig runs as root without DESTDIR only" {
	run -0 inst /opt/first "$BATS_TEST_TMPDIR/one"
	grep -qx 'prefix=/opt/first' "$BATS_TEST_TMPDIR/one/opt/first/lib/pkgconfig/gpuman.pc"
	[[ "$output" != *ldconfig* ]]
	run -0 inst /opt/second "$BATS_TEST_TMPDIR/two"
	run -0 cat "$BATS_TEST_TMPDIR/two/opt/second/lib/pkgconfig/gpuman.pc"
	[[ "$output" == *"prefix=/opt/second"* && "$output" == *"libdir=/opt/second/lib"* ]]
	[[ "$output" != *first* ]]
	PKG_CONFIG_SYSROOT_DIR=$BATS_TEST_TMPDIR/two PKG_CONFIG_PATH=$BATS_TEST_TMPDIR/two/opt/second/lib/pkgconfig \
		run -0 pkg-config --cflags gpuman
	[ "$(echo $output)" = "-I$BATS_TEST_TMPDIR/two/opt/second/include" ]
	[ "$(id -u)" = 0 ] || skip "ldconfig after install: as root only"
	p=$BATS_TEST_TMPDIR/prefix
	run -0 inst "$p"
	[[ "$output" == *$'\nldconfig'* ]]
	make --no-print-directory -C "$GM_ROOT" BUILD="$GM_BUILD" PREFIX="$p" uninstall >/dev/null
}
