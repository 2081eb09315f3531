# bench/: the end-to-end figures of issue 7 (BENCHMARKS.md), and their smoke run.
TEST_TARGETS += test-bench
BENCH_TARGETS += bench-report

.PHONY: test-bench bench-report

# Unit tests of the percentile and token-bucket window math, then the whole program at a tiny size:
# it fails if any section errors and asserts nothing about speed, so the benchmark cannot rot.
test-bench: bin/edgehook edge-wasm
	$(GO) test -race -count=1 ./bench/...
	$(GO) run ./bench -smoke

# The full run, last: it merges the figures bench-edge and bench-harness leave in build/.
# BENCH_TARGETS is complete only once every mk file has been read, hence the second expansion.
.SECONDEXPANSION:
bench-report: $$(filter-out bench-report,$$(BENCH_TARGETS)) bin/edgehook edge-wasm
	$(GO) run ./bench
