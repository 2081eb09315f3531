package store

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestDatabaseFileIsPrivate: the database holds every subscriber's signing secret in clear, so a
// new one and its -wal and -shm files are readable by their owner only, under the usual umask 022
// too (deploy.md's systemd unit sets no UMask). Not parallel: the umask is the process's.
func TestDatabaseFileIsPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "edgehook.db")
	s, err := Open(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateSubscriber(context.Background(), SubscriberInput{URL: "https://example.com/h", Events: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: other users can read the subscribers' signing secrets", filepath.Base(p), fi.Mode().Perm())
		}
	}
}
