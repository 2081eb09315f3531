// Package harnesstest builds the relay's WASI module for tests, from the source they run against,
// the way `make edge-wasm` does.
package harnesstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Package is the import path of the module's main package.
const Package = "github.com/edgehook/edgehook/edge/cmd/wasi"

// HostMACTag makes the module ask the host for HMAC-SHA256 (see shared/signature).
const HostMACTag = "edgehook_hostmac"

// BuildWASM builds the module into dir/relay.wasm (dir/relay-<tags>.wasm with tags) and returns its
// path. `make edge-wasm` builds with HostMACTag; the benchmarks also build without it to compare.
func BuildWASM(dir string, tags ...string) (string, error) {
	name := "relay.wasm"
	if len(tags) > 0 {
		name = "relay-" + strings.Join(tags, "-") + ".wasm"
	}
	out := filepath.Join(dir, name)
	args := []string{"build", "-trimpath", "-buildmode=c-shared", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, Package)...)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out, nil
}
