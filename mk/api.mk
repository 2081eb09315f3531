# origin/api, origin/cmd/edgehook, origin/config: the operator's interface.
TEST_TARGETS += test-api

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
EDGEHOOK_LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: build test-api bin/edgehook
build: bin/edgehook

# Always rebuilt (go's build cache makes that cheap) so bin/edgehook never lags the source.
bin/edgehook:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(EDGEHOOK_LDFLAGS)' -o $@ ./origin/cmd/edgehook

test-api:
	$(GO) test -race -count=1 ./origin/api/... ./origin/cmd/... ./origin/config/...
