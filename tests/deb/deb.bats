#!/usr/bin/env bats
# deb: `make deb`'s packages, built once (dpkg-buildpackage) and read with
# dpkg-deb: what each holds, what it depends on, lintian's verdict, and that the command as
# packaged runs from where the package puts it.  `make check-deb` installs
# them into a fresh Debian as well.

bats_require_minimum_version 1.5.0
GM_ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)

setup_file() {
	export DEBS=$BATS_FILE_TMPDIR/deb
	sh "$GM_ROOT/scripts/mkdeb" "$DEBS" >/dev/null
}

contents() { dpkg-deb -c "$DEBS/$1"_*.deb | awk '{ print $6 }' | sed 's|^\./|/|'; }

@test "four packages, each with its files" {
	run -0 contents gpuman
	for f in /usr/bin/gpuman /usr/bin/gpuman-serve /usr/bin/gpuman-broker /usr/bin/gpuman-runner /usr/bin/gpuman-simload \
		/usr/lib/gpuman/libnvidia-ml.so.1 /usr/share/gpuman/examples/lab-8gpu.json \
		/usr/share/man/man1/gpuman.1.gz /usr/share/man/man1/gpuman-run.1.gz \
		/usr/share/man/man1/gpuman-runner.1.gz /usr/share/man/man1/gpuman-broker.1.gz \
		/usr/share/man/man5/gpuman.conf.5.gz \
		/usr/share/man/man5/gpuman-scenario.5.gz /usr/share/man/man7/gpuman-trust.7.gz \
		/usr/lib/tmpfiles.d/gpuman.conf \
		/usr/share/bash-completion/completions/gpuman /usr/share/zsh/vendor-completions/_gpuman \
		/usr/share/fish/vendor_completions.d/gpuman.fish; do
		grep -qxF "$f" <<<"$output" || { echo "gpuman lacks $f"; false; }
	done
	arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
	run -0 contents libgpuman1
	grep -qxF "/usr/lib/$arch/libgpuman.so.1" <<<"$output"
	run -0 contents libgpuman-dev
	for f in /usr/include/gpuman.h "/usr/lib/$arch/libgpuman.so" "/usr/lib/$arch/pkgconfig/gpuman.pc" \
		/usr/share/man/man3/libgpuman.3.gz; do
		grep -qxF "$f" <<<"$output" || { echo "libgpuman-dev lacks $f"; false; }
	done
	run -0 contents python3-gpuman
	grep -qxF /usr/lib/python3/dist-packages/gpuman/__init__.py <<<"$output"
	grep -qxF /usr/share/man/man3/gpuman-python.3.gz <<<"$output"
	# Nothing under /usr/local, nothing of the build tree.
	run ! grep -h '/usr/local\|/build/' <(for p in gpuman libgpuman1 libgpuman-dev python3-gpuman; do contents $p; done)
}

@test "dependencies: shared SQLite and jansson, the library for Python" {
	run -0 dpkg-deb -f "$DEBS"/gpuman_*.deb Depends
	[[ "$output" == *libsqlite3-0* && "$output" == *libjansson4* ]]
	run -0 dpkg-deb -f "$DEBS"/python3-gpuman_*.deb Depends
	[[ "$output" == *libgpuman1* && "$output" == *python3* ]]
	run -0 dpkg-deb -f "$DEBS"/libgpuman-dev_*.deb Depends
	[[ "$output" == *"libgpuman1 (= "* ]]
}

@test "the packaged gpuman runs from where the package puts it, with its simulator and scenario" {
	x=$BATS_TEST_TMPDIR/x
	dpkg-deb -x "$DEBS"/gpuman_*.deb "$x"
	export GPUMAN_STATE_DIR=$BATS_TEST_TMPDIR/state GPUMAN_SIM_STATE=$BATS_TEST_TMPDIR/sim
	run -0 "$x/usr/bin/gpuman" --sim "$x/usr/share/gpuman/examples/lab-8gpu.json" pick
	[ "$output" = 2 ]
	run -0 zcat "$x/usr/share/man/man1/gpuman.1.gz"
	[[ "$output" == *'.SS "gpuman run"'* ]]
}

@test "lintian finds no error and no warning in the packages" {
	run -0 lintian --fail-on error,warning "$DEBS"/gpuman_*.changes
}

@test "the systemd units of contrib/ are installed, start /usr/bin/gpuman; the broker's socket is enabled" {
	x=$BATS_TEST_TMPDIR/x
	dpkg-deb -x "$DEBS"/gpuman_*.deb "$x"
	dpkg-deb -e "$DEBS"/gpuman_*.deb "$x/DEBIAN"
	for u in gpuman.socket gpuman.service gpuman-serve.service; do
		[ -f "$x/lib/systemd/system/$u" ] || { echo "gpuman lacks /lib/systemd/system/$u"; false; }
	done
	run -0 grep -h '^ExecStart=\|^ListenStream=' "$x"/lib/systemd/system/gpuman.socket \
		"$x"/lib/systemd/system/gpuman.service "$x"/lib/systemd/system/gpuman-serve.service
	# the socket in root's directory, not the registry's (lib/broker_wire.h)
	[ "${lines[0]}" = ListenStream=/run/gpuman-broker/gpuman.sock ]
	[[ "${lines[1]}" == "ExecStart=/usr/bin/gpuman daemon "* ]]
	[[ "${lines[2]}" == "ExecStart=/usr/bin/gpuman serve "* ]]
	grep -qx 'RemoveOnStop=yes' "$x"/lib/systemd/system/gpuman.socket
	grep -qx 'd /run/gpuman-broker 0755 root root -' "$x"/usr/lib/tmpfiles.d/gpuman.conf
	# The broker's socket is enabled and started on install (the broker
	# itself on the first request); serve is not enabled (the --no-enable
	# form: enable only what was enabled before).  All stop on removal.
	run -0 grep -A3 "deb-systemd-helper unmask 'gpuman.socket'" "$x/DEBIAN/postinst"
	[[ "$output" == *"deb-systemd-helper --quiet was-enabled 'gpuman.socket'"* ]]
	run -0 grep -F "deb-systemd-invoke \$_dh_action 'gpuman.socket'" "$x/DEBIAN/postinst"
	run ! grep -F "deb-systemd-invoke \$_dh_action 'gpuman.service'" "$x/DEBIAN/postinst"
	grep -qF "deb-systemd-helper debian-installed 'gpuman-serve.service'" "$x/DEBIAN/postinst"
	run -0 grep "deb-systemd-invoke stop" "$x/DEBIAN/prerm"
	[[ "$output" == *gpuman.socket* && "$output" == *gpuman-serve.service* ]]
}
