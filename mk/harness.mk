# edge/harness, edge/cmd/wasi: the relay core as a WASI module in a local wazero host; the
# WASI conformance runner; the end-to-end test; `make run`.
TEST_TARGETS += test-harness
BENCH_TARGETS += bench-harness

EDGE_WASM := build/relay.wasm

.PHONY: edge-wasm edge-pgo test-harness bench-harness run conformance-check

# Always rebuilt (go's build cache makes that cheap). The edgehook_hostmac tag has the host compute
# HMAC-SHA256 (see shared/signature/mac_hostmac.go); -trimpath makes the bytes, and so wazero's
# compilation cache key, the same in every checkout. edge/harness/harnesstest builds the same way.
edge-wasm:
	@mkdir -p build
	GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -buildmode=c-shared -tags edgehook_hostmac -o $(EDGE_WASM) ./edge/cmd/wasi

# edge/cmd/wasi/default.pgo, the CPU profile the module's build optimises with (go build uses a
# main package's default.pgo): BenchmarkGuestPath runs the module's per-request work natively.
# Regenerate it after large changes to the relay's hot path, then compare with make bench-harness.
edge-pgo:
	@mkdir -p build
	$(GO) test -run '^$$' -bench GuestPath -benchtime 5s -o build/abi-pgo.test -cpuprofile $(CURDIR)/edge/cmd/wasi/default.pgo ./edge/harness/abi/
	rm -f build/abi-pgo.test

# No -race where the module is compiled: wazero's compiler, race-instrumented, takes minutes per
# module on this machine (the host's pool, a channel of tokens and a stack under a mutex, is
# tested without). The end-to-end test runs bin/edgehook (mk/api.mk builds it) as separate
# processes.
test-harness: bin/edgehook
	$(GO) test -race -count=1 ./edge/harness/abi/ ./edge/harness/internal/... ./internal/h1/
	rm -f build/conformance/wasi.json
	EDGEHOOK_CONFORMANCE_DIR=$(CURDIR)/build/conformance $(GO) test -count=1 ./edge/harness/
	EDGEHOOK_BIN=$(CURDIR)/bin/edgehook $(GO) test -count=1 -timeout 6m ./edge/e2e/

# Per-request cost of the relay for a 1 KB body: native core vs the WASI module in the harness,
# same run, and the guest's calls and allocations per request. Writes build/bench-harness.json and
# prints a table; BENCH_HARNESS_BASELINE=<an earlier bench-harness.json> adds its figures beside.
# The benchmarks run in BENCH_HARNESS_RUNS processes and each time is the median of theirs: this
# machine runs a whole process fast or slow, and one draw should not decide a target.
BENCH_HARNESS_RUNS ?= 3
bench-harness:
	@mkdir -p build
	rm -f build/bench-harness.run*.json
	for i in $$(seq 2 $(BENCH_HARNESS_RUNS)); do \
		EDGEHOOK_BENCH_OUT=$(CURDIR)/build/bench-harness.run$$i.json \
			$(GO) test -run '^$$' -bench . -benchtime 5000x -count 1 ./edge/harness/ >/dev/null || exit 1; \
	done
	EDGEHOOK_BENCH_OUT=$(CURDIR)/build/bench-harness.json EDGEHOOK_BENCH_BASELINE=$(BENCH_HARNESS_BASELINE) \
		EDGEHOOK_BENCH_RUNS="$$(ls $(CURDIR)/build/bench-harness.run*.json 2>/dev/null)" \
		$(GO) test -run '^$$' -bench . -benchtime 5000x -count 1 ./edge/harness/

# The whole local stack in one process: API, engine, local edge, sample receivers (edgehook dev).
run: bin/edgehook edge-wasm
	bin/edgehook --db build/dev.db --log-level warn dev

# Every runtime ran every conformance scenario and passed it: test-edge (native, workerd) and
# test-harness (wasi) each write build/conformance/<runtime>.json and remove their stale ones first
# (see edge/harness/internal/conformancecheck). Runs after both, since mk/edge.mk is included first.
TEST_TARGETS += conformance-check
conformance-check:
	$(GO) run ./edge/harness/internal/conformancecheck build/conformance native wasi workerd
