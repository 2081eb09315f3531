package harness_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/harness"
	"github.com/edgehook/edgehook/edge/harness/abi"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// A host keeps each module's compiled code in a directory of its own under the cache root, marks
// it used at each start, and removes the other modules' directories (and those of the layout
// before, wazero's own directly under the root) unused for harness.CacheTTL; nothing else.
func TestNewHostPrunesTheCompilationCache(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	old, recent := now.Add(-harness.CacheTTL-time.Hour), now.Add(-harness.CacheTTL+time.Hour)
	dirs := map[string]time.Time{
		strings.Repeat("a", 64):      old,    // another module, unused too long: removed
		strings.Repeat("b", 64):      recent, // another module, used within the TTL: kept
		"wazero-v1.11.0-amd64-linux": old,    // the layout before: removed
		"wazero-v1.12.0-amd64-linux": recent, // kept
		"notes":                      old,    // not the cache's: kept
		strings.Repeat("A", 64):      old,    // not a name a host makes: kept
	}
	for name, mtime := range dirs {
		makeAged(t, filepath.Join(root, name), mtime)
	}

	resp := abi.EncodeResponse(nil, relay.Reject(405, wire.ReasonMethod, "no"))
	wasm := wasmModule(returning(resp), resp)
	startHost(t, root, wasm)
	mine := ""
	for _, name := range list(t, root) {
		if _, ok := dirs[name]; !ok {
			if mine != "" {
				t.Fatalf("the host made %s and %s; want one directory for its module", mine, name)
			}
			mine = name
		}
	}
	if len(mine) != 64 {
		t.Fatalf("the host's module directory is %q, want its SHA-256 in hex", mine)
	}
	if entries := list(t, filepath.Join(root, mine)); len(entries) != 1 || !strings.HasPrefix(entries[0], "wazero-") {
		t.Errorf("%s holds %q, want wazero's one directory", mine, entries)
	}
	want := []string{mine, strings.Repeat("A", 64), strings.Repeat("b", 64), "notes", "wazero-v1.12.0-amd64-linux"}
	slices.Sort(want)
	if got := list(t, root); !slices.Equal(got, want) {
		t.Errorf("after the first start the cache holds %q, want %q", got, want)
	}

	// The module's own directory, however old, is kept and marked used again.
	makeAged(t, filepath.Join(root, mine), old)
	startHost(t, root, wasm)
	info, err := os.Stat(filepath.Join(root, mine))
	if err != nil {
		t.Fatalf("the module's own directory: %v", err)
	}
	if age := time.Since(info.ModTime()); age > time.Hour {
		t.Errorf("the module's own directory was last marked used %s ago, want at this start", age)
	}
}

// makeAged creates dir (with a file in it, as wazero's entries are) and sets its mtime.
func makeAged(t *testing.T, dir string, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "entry"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dir, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// startHost starts a host of wasm with its cache under root and checks it answers.
func startHost(t *testing.T, root string, wasm []byte) {
	t.Helper()
	h := hostFor(t, root, wasm, stubUpstream{}, false)
	if resp := h.Handle(context.Background(), &relay.Request{Method: "GET", Header: relay.Header{}}); resp.Status != 405 {
		t.Fatalf("status %d, want the module's 405: %s", resp.Status, resp.Detail)
	}
}

// list returns the names in dir, sorted.
func list(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names
}
