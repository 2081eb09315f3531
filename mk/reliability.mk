# reliability/: the crash, fault and hostile-input suite against the real binary (bin/edgehook)
# and the local edge (build/relay.wasm), and the fuzz targets not owned by another area. Figures
# land in build/reliability/*.json; RELIABILITY.md is filled from them.
TEST_TARGETS += test-reliability

# Each fuzz target as package:Target:count, the count being make test's brief run (shared/ runs its
# own in mk/shared.mk). Counts, not durations: a timed run on a loaded machine can end with
# "context deadline exceeded" while a worker is inside a slow input (FuzzAPIRequest writes to SQLite
# for every input), a failure of the fuzzer's shutdown rather than of the code.
RELIABILITY_FUZZ := \
	./origin/api:FuzzAPIRequest:300x \
	./reliability/fuzz:FuzzRelayHandle:20000x \
	./reliability/fuzz:FuzzABIDecode:30000x \
	./reliability/fuzz:FuzzConfigFile:30000x \
	./reliability/fuzz:FuzzByteSize:30000x \
	./reliability/fuzz:FuzzParseOutcome:30000x
# brief: each target's own count; set a duration (e.g. 30s) to run every target that long.
RELIABILITY_FUZZTIME ?= brief
# The documented long run: `make fuzz-reliability-long` (about 5 minutes per target).
RELIABILITY_LONG_FUZZTIME ?= 5m

.PHONY: test-reliability fuzz-reliability-long
# The crash tests run without -race: their subjects are child processes (not race-instrumented
# anyway), and under -race the test's own SQLite reads of the delivery statuses slow to seconds on a
# loaded machine, so its progress-paced kills fall behind the drain.
test-reliability: bin/edgehook edge-wasm
	$(GO) test -race -count=1 -timeout 10m ./reliability/faults/ ./reliability/fuzz/ ./reliability/hostile/ ./reliability/internal/...
	$(GO) test -count=1 -timeout 10m ./reliability/crash/
	GO=$(GO) reliability/fuzz.sh $(RELIABILITY_FUZZTIME) $(RELIABILITY_FUZZ)

fuzz-reliability-long:
	GO=$(GO) reliability/fuzz.sh $(RELIABILITY_LONG_FUZZTIME) $(RELIABILITY_FUZZ) $(SHARED_FUZZ)
