# shared/: the contract both sides compile.
TEST_TARGETS += test-shared
BENCH_TARGETS += bench-shared

# Each fuzz target as package:Target. -fuzz takes one target per run, so they run one by one.
SHARED_FUZZ := \
	./shared/signature:FuzzVerify \
	./shared/signature:FuzzParseSecrets \
	./shared/signature:FuzzHop \
	./shared/wire:FuzzParseRetryAfter \
	./shared/wire:FuzzDecodeSubscriberRecord \
	./shared/wire:FuzzDecodeBulk \
	./shared/wire:FuzzPattern
# A count, not a duration: a duration -fuzztime races Go's fuzzing coordinator and, on a loaded
# machine, can fail with "context deadline exceeded" and no failing input (golang/go#75804).
# 30000 executions take 1–8 s per target here; -timeout still bounds a run in time. Minimizing a
# new interesting input is bounded by a count as well (its default is up to 60 s per input).
SHARED_FUZZTIME ?= 30000x
SHARED_FUZZFLAGS = -run='^$$' -fuzztime=$(SHARED_FUZZTIME) -fuzzminimizetime=2000x -timeout=2m

.PHONY: test-shared bench-shared
test-shared:
	$(GO) test -race -count=1 ./shared/...
	@set -e; for f in $(SHARED_FUZZ); do \
		pkg=$${f%%:*}; target=$${f##*:}; \
		echo "$(GO) test -fuzz=^$$target\$$ $(SHARED_FUZZFLAGS) $$pkg"; \
		$(GO) test -fuzz="^$$target\$$" $(SHARED_FUZZFLAGS) $$pkg; \
	done

bench-shared:
	$(GO) test -run='^$$' -bench=. -benchmem ./shared/...
