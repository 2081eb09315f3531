# reliability/: the crash, fault and hostile-input suite against the real binary (bin/edgehook)
# and the local edge (build/relay.wasm), and the fuzz targets not owned by another area. Figures
# land in build/reliability/*.json; RELIABILITY.md is filled from them.
TEST_TARGETS += test-reliability

# Each fuzz target as package:Target (shared/ runs its own in mk/shared.mk).
RELIABILITY_FUZZ := \
	./origin/api:FuzzAPIRequest \
	./reliability/fuzz:FuzzRelayHandle \
	./reliability/fuzz:FuzzABIDecode \
	./reliability/fuzz:FuzzConfigFile \
	./reliability/fuzz:FuzzByteSize \
	./reliability/fuzz:FuzzParseOutcome
RELIABILITY_FUZZTIME ?= 3s
# The documented long run: `make fuzz-reliability-long` (about 5 minutes per target).
RELIABILITY_LONG_FUZZTIME ?= 5m

.PHONY: test-reliability fuzz-reliability-long
test-reliability: bin/edgehook edge-wasm
	$(GO) test -race -count=1 -timeout 10m ./reliability/...
	GO=$(GO) reliability/fuzz.sh $(RELIABILITY_FUZZTIME) $(RELIABILITY_FUZZ)

fuzz-reliability-long:
	GO=$(GO) reliability/fuzz.sh $(RELIABILITY_LONG_FUZZTIME) $(RELIABILITY_FUZZ) $(SHARED_FUZZ)
