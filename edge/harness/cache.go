package harness

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CacheTTL is how long a module's compiled code stays in the compilation cache unused: a host
// starting removes the other modules' directories not used for that long.
const CacheTTL = 30 * 24 * time.Hour

// moduleCache returns the compilation cache directory of the module wasm under root: a
// subdirectory named by the module's SHA-256, created if need be and marked used now (its mtime).
// wazero keys its entries by module already, but keeps them forever in one directory per wazero
// version, ~15 MB per module: each edgehook upgrade would leave one more behind.
func moduleCache(root string, wasm []byte, now time.Time) (string, error) {
	sum := sha256.Sum256(wasm)
	dir := filepath.Join(root, hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, os.Chtimes(dir, now, now)
}

// pruneCache removes the directories under root, other than keep, that a host created for a
// module (or wazero created there before modules had their own) and that nobody has marked used
// for CacheTTL; it returns how many it removed. Anything else under root is left alone. Errors
// are ignored: the cache is only a cache, and a directory may be in another process's hands. A
// process running a module has its compiled code in memory; a host starting marks its module's
// directory before it compiles, so only a start in the instant between another process's check
// and removal of a directory unused for CacheTTL could find its directory gone.
func pruneCache(root, keep string, now time.Time) int {
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0
	}
	removed := 0
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || name == keep || !(isModuleDir(name) || strings.HasPrefix(name, "wazero-")) {
			continue
		}
		if info, err := e.Info(); err != nil || now.Sub(info.ModTime()) < CacheTTL {
			continue
		}
		if os.RemoveAll(filepath.Join(root, name)) == nil {
			removed++
		}
	}
	return removed
}

// isModuleDir reports whether name is one moduleCache makes: 64 lowercase hex digits.
func isModuleDir(name string) bool {
	if len(name) != 2*sha256.Size {
		return false
	}
	for _, c := range name {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
