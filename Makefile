# edgehook — `make test` runs every test the project has; `make run` starts the local stack.
# Each area keeps its targets in mk/<area>.mk and appends its test target to TEST_TARGETS.

GO ?= go
export GOFLAGS := -buildvcs=false
# Keep wrangler and workerd offline and quiet.
export WRANGLER_SEND_METRICS := false
export CLOUDFLARE_CF_FETCH_ENABLED := false

TEST_TARGETS :=
BENCH_TARGETS :=

include $(sort $(wildcard mk/*.mk))

.PHONY: test bench vet fmt-check
test: vet fmt-check $(TEST_TARGETS)

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Performance figures (BENCHMARKS.md); each area appends its piece to BENCH_TARGETS.
bench: $(BENCH_TARGETS)
