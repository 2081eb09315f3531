package wire_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSharedBuildsForWASM builds ./shared/... for both WASM targets the edge uses (GOOS=js for the
// Worker, GOOS=wasip1 for the wazero harness, also with the edgehook_hostmac tag its module is
// built with) and checks that net/http stays out of them: it would double the Worker's size.
func TestSharedBuildsForWASM(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go") // go test puts its own GOROOT/bin first on PATH
	if err != nil {
		t.Fatalf("go toolchain not found: %v", err)
	}
	for _, target := range []struct{ goos, tags string }{{"js", ""}, {"wasip1", ""}, {"wasip1", "edgehook_hostmac"}} {
		goos := target.goos
		t.Run(goos+"/"+target.tags, func(t *testing.T) {
			t.Parallel()
			run := func(verb string, args ...string) string {
				args = append([]string{verb, "-tags=" + target.tags}, args...)
				cmd := exec.Command(goBin, args...)
				cmd.Dir = "../.." // the module root
				cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=wasm", "CGO_ENABLED=0")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("GOOS=%s GOARCH=wasm go %s: %v\n%s", goos, strings.Join(args, " "), err, out)
				}
				return string(out)
			}
			run("build", "./shared/...")
			deps := strings.Fields(run("list", "-deps", "-f", "{{.ImportPath}}", "./shared/..."))
			if len(deps) < 3 {
				t.Fatalf("go list -deps listed only %v", deps)
			}
			for _, d := range deps {
				if d == "net/http" {
					t.Fatalf("./shared/... depends on net/http for GOOS=%s", goos)
				}
			}
		})
	}
}
