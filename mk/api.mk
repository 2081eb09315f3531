# origin/api, origin/cmd/edgehook, origin/config: the operator's interface (and internal/httpserve, the
# bounds its HTTP servers put on clients).
TEST_TARGETS += test-api

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
EDGEHOOK_LDFLAGS := -s -w -X main.version=$(VERSION)
EDGEHOOK_BUILD := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(EDGEHOOK_LDFLAGS)'

.PHONY: build dist test-api doc-tools bin/edgehook
build: bin/edgehook

# Always rebuilt (go's build cache makes that cheap) so bin/edgehook never lags the source.
bin/edgehook:
	@test -x $@ || echo "building $@: the first build on a machine takes a few minutes"
	$(EDGEHOOK_BUILD) -o $@ ./origin/cmd/edgehook

# Static binaries for the two Linux targets an operator deploys to (docs/deploy.md).
dist:
	GOOS=linux GOARCH=amd64 $(EDGEHOOK_BUILD) -o build/dist/edgehook-linux-amd64 ./origin/cmd/edgehook
	GOOS=linux GOARCH=arm64 $(EDGEHOOK_BUILD) -o build/dist/edgehook-linux-arm64 ./origin/cmd/edgehook

test-api: doc-tools
	$(GO) test -race -count=1 ./origin/api/... ./origin/cmd/... ./origin/config/... ./internal/httpserve/

# The Debian packages the tests of docs/deploy.md run its snippets with: sqlite3's shell (the
# backup) and PHP with curl (the emit helpers). Installed once, when missing; apt needs root.
DOC_TOOLS := sqlite3 php-cli php-curl
APT_GET := $(if $(filter 0,$(shell id -u)),,sudo) apt-get -y -qq --no-install-recommends
doc-tools:
	@if ! command -v sqlite3 >/dev/null || ! php -m 2>/dev/null | grep -qx curl; then \
	  echo "installing $(DOC_TOOLS) (apt) for the tests of docs/deploy.md"; \
	  $(APT_GET) install $(DOC_TOOLS) >/dev/null || { $(APT_GET) update && $(APT_GET) install $(DOC_TOOLS) >/dev/null; }; \
	fi
