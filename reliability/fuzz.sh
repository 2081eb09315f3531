#!/bin/sh
# Runs each native Go fuzz target for FUZZTIME and records what it did in
# build/reliability/fuzz-<Target>-<FUZZTIME>.json: inputs tried (the fuzzer's exec count), new interesting
# inputs, and whether it found a crash. Usage: reliability/fuzz.sh FUZZTIME pkg:Target[:brief]...
# FUZZTIME "brief" runs each target for the count or duration after its second colon.
# Exits non-zero if any target fails; the failing input is in <pkg>/testdata/fuzz/<Target>/.
set -u
fuzztime=$1
shift
out=build/reliability
mkdir -p "$out"
status=0
for spec in "$@"; do
	pkg=${spec%%:*}
	rest=${spec#*:}
	target=${rest%%:*}
	brief=${rest#*:}
	[ "$brief" = "$rest" ] && brief=3s
	run=$fuzztime
	[ "$run" = brief ] && run=$brief
	log=$out/fuzz-$target-$run.log
	echo "go test -run=^\$ -fuzz=^$target\$ -fuzztime=$run $pkg"
	if ${GO:-go} test -run='^$' -fuzz="^$target\$" -fuzztime="$run" -timeout=0 "$pkg" >"$log" 2>&1; then
		crashes=0
	else
		crashes=1
		status=1
		tail -n 30 "$log"
	fi
	# The last progress line: "fuzz: elapsed: 3s, execs: 31605 (14398/sec), new interesting: 1 (total: 6)".
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*')
	interesting=$(grep -o 'new interesting: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*')
	printf '{"target": "%s", "package": "%s", "fuzztime": "%s", "inputs": %s, "new_interesting": %s, "crashes": %s}\n' \
		"$target" "$pkg" "$run" "${execs:-0}" "${interesting:-0}" "$crashes" >"$out/fuzz-$target-$run.json"
	cat "$out/fuzz-$target-$run.json"
done
exit $status
