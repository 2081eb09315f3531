# origin/api, origin/cmd/edgehook, origin/config: the operator's interface (and internal/httpserve, the
# bounds its HTTP servers put on clients).
TEST_TARGETS += test-api

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
EDGEHOOK_LDFLAGS := -s -w -X main.version=$(VERSION)
EDGEHOOK_BUILD := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(EDGEHOOK_LDFLAGS)'

.PHONY: build dist test-api bin/edgehook
build: bin/edgehook

# Always rebuilt (go's build cache makes that cheap) so bin/edgehook never lags the source.
bin/edgehook:
	@test -x $@ || echo "building $@: the first build on a machine takes a few minutes"
	$(EDGEHOOK_BUILD) -o $@ ./origin/cmd/edgehook

# Static binaries for the two Linux targets an operator deploys to (docs/deploy.md).
dist:
	GOOS=linux GOARCH=amd64 $(EDGEHOOK_BUILD) -o build/dist/edgehook-linux-amd64 ./origin/cmd/edgehook
	GOOS=linux GOARCH=arm64 $(EDGEHOOK_BUILD) -o build/dist/edgehook-linux-arm64 ./origin/cmd/edgehook

test-api:
	$(GO) test -race -count=1 ./origin/api/... ./origin/cmd/... ./origin/config/... ./internal/httpserve/
