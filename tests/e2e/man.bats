#!/usr/bin/env bats
# man: the manual (docs/*.md, made into man pages by scripts/mkman) against
# the programs' own --help: every option --help names is in the command's
# page, and every option the page documents is in --help.  An option goes
# in two places: its line in the command's --help (cli/cmd_NAME.c) and its
# item in docs/gpuman-NAME.1.md ("* `--opt` *ARG*:" and the text indented
# below; the options several commands share are in docs/select.md).
#
# not under ASan: it compares texts, the same in both builds; the
# commands' option parsing runs sanitized in the other files.

load helpers

setup_file() {
	export MAN_DIR=$BATS_FILE_TMPDIR/man
	sh "$GM_ROOT/scripts/mkman" "$MAN_DIR"
}

# opts - the options (-x, --xyz) named in stdin, one a line, sorted.
opts() {
	grep -oE '(^|[^A-Za-z0-9_-])--?[A-Za-z][A-Za-z0-9-]*' | sed 's/^[^-]*//' | sort -u
}

# help_defined FILE - the options a --help text defines: its usage lines
# (up to the first blank line) and its option lines (indented, starting
# with -).
help_defined() {
	awk 'NR == 1 { u = 1 } u && NF == 0 { u = 0 } u || /^[ \t]+-/' "$1" | opts
}

# help_named FILE - every option a --help text names, its examples aside
# (other programs' options: torchrun --nproc-per-node).
help_named() {
	awk '/^examples?:$/ { ex = 1; next } ex && NF == 0 { ex = 0 } !ex' "$1" | opts
}

# roff_text PAGE - the page's text without roff's escapes.
roff_text() {
	sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\&//g' -e 's/\\e/\\/g' "$1"
}

# page_defined PAGE - the options the page documents: the terms (.TP) that
# start with -.
page_defined() {
	roff_text "$1" | awk 'tp { if (/^-/) print; tp = 0 } /^\.TP$/ { tp = 1 }' | opts
}

# compare HELP PAGE - nothing and 0 when they agree; else what differs.
compare() {
	local bad=0 o
	for o in $(comm -23 <(help_defined "$1") <(page_defined "$2")); do
		echo "$o: in --help, but not an option of the man page"
		bad=1
	done
	for o in $(comm -23 <(page_defined "$2") <(help_named "$1")); do
		echo "$o: an option of the man page, but not in --help"
		bad=1
	done
	for o in $(comm -23 <(help_named "$1" | grep -- '^--') <(roff_text "$2" | opts)); do
		echo "$o: named by --help, never by the man page"
		bad=1
	done
	return $bad
}

# commands - the commands of gpuman's table that --help lists.
commands() {
	gpuman complete commands | cut -f1 | grep -vx help
}

@test "every command of the table has its page, named in gpuman(1), with the table's summary" {
	run -0 commands
	[ "${#lines[@]}" -ge 17 ]
	for c in "${lines[@]}"; do
		[ -f "$MAN_DIR/gpuman-$c.1" ] || { echo "no page gpuman-$c.1: write docs/gpuman-$c.1.md"; false; }
		grep -qxF ".SS \"gpuman $c\"" "$MAN_DIR/gpuman.1" || { echo "gpuman(1) has no section on $c"; false; }
		summary=$(gpuman complete commands | awk -F'\t' -v c="$c" '$1 == c { print $2 }')
		name=$(roff_text "$MAN_DIR/gpuman-$c.1" | awk '/^\.SH NAME$/ { getline; print; exit }')
		[ "$name" = "gpuman-$c - $summary" ] || { echo "gpuman-$c.1 NAME: '$name', the table: '$summary'"; false; }
	done
	for p in gpuman-runner.1 gpuman-simload.1 gpuman.conf.5 gpuman-scenario.5 gpuman-trust.7 libgpuman.3 \
		gpuman-python.3; do
		[ -f "$MAN_DIR/$p" ] || { echo "no page $p"; false; }
	done
}

@test "each command's --help and its man page name the same options" {
	bad=0
	while read -r c; do
		gpuman "$c" --help >"$BATS_TEST_TMPDIR/help"
		if ! out=$(compare "$BATS_TEST_TMPDIR/help" "$MAN_DIR/gpuman-$c.1"); then
			echo "gpuman $c (cli/cmd_$c.c against docs/gpuman-$c.1.md):"
			echo "$out"
			bad=1
		fi
	done < <(commands)
	gpuman --help >"$BATS_TEST_TMPDIR/help"
	compare "$BATS_TEST_TMPDIR/help" "$MAN_DIR/gpuman.1" || bad=1
	for p in gpuman-runner gpuman-simload; do
		"$GM_BUILD/$p" --help >"$BATS_TEST_TMPDIR/help"
		compare "$BATS_TEST_TMPDIR/help" "$MAN_DIR/$p.1" || bad=1
	done
	[ "$bad" = 0 ]
}

@test "the comparison fails when an option leaves either side" {
	gpuman run --help >"$BATS_TEST_TMPDIR/help"
	page=$MAN_DIR/gpuman-run.1
	run -0 compare "$BATS_TEST_TMPDIR/help" "$page"
	# The page loses --fallback's item.
	awk '/^\.TP$/ { getline t; if (t ~ /fallback/) { getline; next } print; print t; next } { print }' \
		"$page" >"$BATS_TEST_TMPDIR/page"
	run -1 compare "$BATS_TEST_TMPDIR/help" "$BATS_TEST_TMPDIR/page"
	[[ "$output" == *"--fallback: in --help, but not an option of the man page"* ]]
	# --help loses --idle: the page's item is left over.
	grep -v -- '--idle' "$BATS_TEST_TMPDIR/help" >"$BATS_TEST_TMPDIR/help-less"
	run -1 compare "$BATS_TEST_TMPDIR/help-less" "$page"
	[[ "$output" == *"--idle: an option of the man page, but not in --help"* ]]
	# A short option leaves the page: -n.
	sed 's/^\\fB\\-n\\fR \\fIN\\fR$/\\fIN\\fR/' "$page" >"$BATS_TEST_TMPDIR/page"
	run -1 compare "$BATS_TEST_TMPDIR/help" "$BATS_TEST_TMPDIR/page"
	[[ "$output" == *"-n: in --help, but not an option of the man page"* ]]
}

@test "the pages render without a warning from man" {
	for p in "$MAN_DIR"/*; do
		run -0 --separate-stderr env LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$p"
		[ -z "$stderr" ] || { echo "${p##*/}: $stderr"; false; }
	done
}

@test "gpuman.conf(5)'s example is a valid gpuman.conf" {
	awk '/^```/ { n++; next } n == 3 { print } n > 3 { exit }' "$GM_ROOT/docs/gpuman.conf.5.md" \
		>"$BATS_TEST_TMPDIR/gpuman.conf"
	grep -q '^\[limits\]' "$BATS_TEST_TMPDIR/gpuman.conf"
	GPUMAN_CONFIG=$BATS_TEST_TMPDIR/gpuman.conf run -0 gpuman --sim "$GM_ROOT/examples/lab-8gpu.json" pick
	# and the check is real: a misspelt key is refused
	sed 's/^max_gpus = 2/max_gpu = 2/' "$BATS_TEST_TMPDIR/gpuman.conf" >"$BATS_TEST_TMPDIR/bad.conf"
	GPUMAN_CONFIG=$BATS_TEST_TMPDIR/bad.conf run -1 gpuman --sim "$GM_ROOT/examples/lab-8gpu.json" pick
}

@test "the README's picture of status is what status prints" {
	# The block after the README's marker: its command line, then the output.
	awk '/man.bats checks that this is what status prints/ { on = 1; next }
		on && /^```$/ { if (++fence == 2) exit; next } on && fence == 1 { print }' \
		"$GM_ROOT/README.md" >"$BATS_TEST_TMPDIR/readme"
	[ "$(head -1 "$BATS_TEST_TMPDIR/readme")" = '$ COLUMNS=100 gpuman --sim examples/lab-8gpu.json status' ]
	cd "$GM_ROOT"
	COLUMNS=100 gpuman --sim examples/lab-8gpu.json status >"$BATS_TEST_TMPDIR/status"
	tail -n +2 "$BATS_TEST_TMPDIR/readme" | diff - "$BATS_TEST_TMPDIR/status"
}
