package httpserve_test

import (
	"testing"
	"time"

	"github.com/edgehook/edgehook/internal/httpserve"
	"github.com/edgehook/edgehook/origin/config"
)

// TestReadTimeoutLetsTheLargestBodyIn: a request is read within a minute plus a second per MiB of
// the largest body the server takes, so a client uploading at 1 MiB/s gets a body at the 100 MiB
// --body-limit (or the edge's largest --max-body) in; a flat minute needed 1.7 MB/s.
func TestReadTimeoutLetsTheLargestBodyIn(t *testing.T) {
	for limit, want := range map[int64]time.Duration{
		1 << 20:   61 * time.Second,  // the edge's default --max-body
		8 << 20:   68 * time.Second,  // the default --batch-body-limit
		100 << 20: 160 * time.Second, // the largest --body-limit and --max-body
	} {
		if got := httpserve.ReadTimeout(limit); got != want {
			t.Errorf("ReadTimeout(%d MiB) = %s, want %s", limit>>20, got, want)
		}
	}
}

// TestReadTimeoutOfAHugeBatchBodyLimit: --batch-body-limit has no upper bound (a
// ByteSize takes up to 2^62 bytes), and ReadTimeout adds a second per MiB in int64 nanoseconds:
// from about 8.8 PiB it overflows, and a ReadTimeout <= 0 is no read timeout at all.
func TestReadTimeoutOfAHugeBatchBodyLimit(t *testing.T) {
	t.Parallel()
	var b config.ByteSize
	if err := b.Set("1073741824GiB"); err != nil { // accepted by the flag
		t.Fatal(err)
	}
	if got := httpserve.ReadTimeout(int64(b)); got <= 0 {
		t.Fatalf("ReadTimeout(--batch-body-limit %s) = %s: no read timeout at all", b, got)
	}
}
