package harness_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgehook/edgehook/edge/harness/abi"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// Without a user cache directory ($XDG_CACHE_HOME, $HOME: a system service run without User=),
// the host must not take compiled code from a directory any local user may create first: the
// temporary directory. Here another user planted there, under this module's name, the compiled
// code of another module; the host must run its own module all the same.
func TestNoSharedCompilationCache(t *testing.T) {
	resp := abi.EncodeResponse(nil, relay.Reject(405, wire.ReasonMethod, "no"))
	mine, planted := wasmModule(returning(resp), resp), wasmModule(counting(resp), resp)
	// Each module's cache entry, made in a cache of its own.
	entry := func(wasm []byte) (rel string, data []byte) {
		root := t.TempDir()
		hostFor(t, root, wasm, stubUpstream{}, false)
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				rel, _ = filepath.Rel(root, path)
				data, err = os.ReadFile(path)
			}
			return err
		})
		if err != nil || rel == "" {
			t.Fatalf("no cache entry under %s: %v", root, err)
		}
		return rel, data
	}
	myEntry, _ := entry(mine)
	_, plantedCode := entry(planted)

	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	shared := filepath.Join(tmp, "edgehook", "wazero", myEntry)
	if err := os.MkdirAll(filepath.Dir(shared), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shared, plantedCode, 0o666); err != nil {
		t.Fatal(err)
	}
	h := hostFor(t, "", mine, stubUpstream{}, false)
	if got := h.Handle(context.Background(), &relay.Request{Method: "GET", Header: relay.Header{}}); got.Status != 405 {
		t.Errorf("status %d, want the module's own 405: the host ran the code planted in %s", got.Status, shared)
	}
}
