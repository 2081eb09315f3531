# interop/: our Standard Webhooks signatures against the reference implementation subscribers verify
# with (npm standardwebhooks), both ways, through the real binary.
TEST_TARGETS += test-interop

.PHONY: test-interop
test-interop: npm-deps bin/edgehook
	EDGEHOOK_BIN=$(CURDIR)/bin/edgehook GO=$(GO) $(NODE) --test interop/
