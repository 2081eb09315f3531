package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The directory of the module a host runs is never removed, even once the clock is past its mark
// (a clock stepped forward, or a cache on a file server whose clock is behind).
func TestPruneCacheKeepsTheCurrentModule(t *testing.T) {
	root := t.TempDir()
	keep, other := strings.Repeat("c", 64), strings.Repeat("d", 64)
	for _, name := range []string{keep, other} {
		if err := os.Mkdir(filepath.Join(root, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if n := pruneCache(root, keep, time.Now().Add(2*CacheTTL)); n != 1 {
		t.Errorf("removed %d directories, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(root, keep)); err != nil {
		t.Errorf("the current module's directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, other)); !os.IsNotExist(err) {
		t.Errorf("the other module's directory: %v, want it removed", err)
	}
}
