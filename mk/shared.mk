# shared/: the contract both sides compile.
TEST_TARGETS += test-shared

.PHONY: test-shared
test-shared:
	$(GO) test -race -count=1 ./shared/...
