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
// too (deploy.md's systemd unit sets no UMask), also when --db is a symbolic link to a file not
// there yet (a data disk mounted elsewhere, a path prepared before the first start). Not
// parallel: the umask is the process's.
func TestDatabaseFileIsPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, link := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "edgehook.db")
		file := path // the database's own file
		if link {
			file = filepath.Join(dir, "data", "edgehook.db")
			if err := os.Mkdir(filepath.Dir(file), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(file, path); err != nil {
				t.Fatal(err)
			}
		}
		s, err := Open(context.Background(), Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateSubscriber(context.Background(), SubscriberInput{URL: "https://example.com/h", Events: []string{"*"}}); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{file, file + "-wal", file + "-shm"} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("through a link %v: %s has mode %v: other users can read the subscribers' signing secrets", link, filepath.Base(p), fi.Mode().Perm())
			}
		}
		s.Close()
	}
}
