# origin/store and origin/engine: the durable queue and the delivery engine.
TEST_TARGETS += test-origin
BENCH_TARGETS += bench-origin

.PHONY: test-origin bench-origin
test-origin:
	$(GO) test -race -count=1 ./origin/store/... ./origin/engine/...

# Emit throughput and the claim → send → settle cycle against an in-process sink.
bench-origin:
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 ./origin/store/... ./origin/engine/...
