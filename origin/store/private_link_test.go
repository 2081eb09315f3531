package store

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestDatabaseThroughLinkIsPrivate: a --db that is a symbolic link to a file not there yet (a data
// disk mounted elsewhere, a path prepared before the first start) makes a new database as a plain
// path does: readable by its owner only, with its -wal and -shm files. Not parallel: the umask is
// the process's.
func TestDatabaseThroughLinkIsPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	target, path := filepath.Join(dir, "data", "edgehook.db"), filepath.Join(dir, "edgehook.db")
	if err := os.Mkdir(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateSubscriber(context.Background(), SubscriberInput{URL: "https://example.com/h", Events: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{target, target + "-wal", target + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: other users can read the subscribers' signing secrets", filepath.Base(p), fi.Mode().Perm())
		}
	}
}
