package main

import (
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/config"
)

// TestCheckServeListen: without a token only loopback addresses are accepted.
func TestCheckServeListen(t *testing.T) {
	saved := serveFlags
	t.Cleanup(func() { serveFlags = saved })
	serveFlags.batchBodyLimit = global.bodyLimit
	cases := []struct {
		listen string
		token  bool
		ok     bool
	}{
		{"127.0.0.1:8080", false, true},
		{"127.9.9.9:0", false, true},
		{"[::1]:8080", false, true},
		{"localhost:8080", false, true},
		// Names are case-insensitive: the API took Host "LOCALHOST" as loopback, serve refused it.
		{"LOCALHOST:8080", false, true},
		{"localhost.:8080", false, true},
		{":8080", false, false}, // every interface
		{"0.0.0.0:8080", false, false},
		{"[::]:8080", false, false},
		{"192.168.1.10:8080", false, false},
		{"api.example.com:8080", false, false},
		{"0.0.0.0:8080", true, true},
		{"api.example.com:8080", true, true},
		{"127.0.0.1", false, false}, // no port
	}
	for _, c := range cases {
		serveFlags.listen, serveFlags.tokens = c.listen, nil
		if c.token {
			serveFlags.tokens = []string{"t"}
		}
		if err := checkServe(); (err == nil) != c.ok {
			t.Errorf("--listen %s (token %v): err = %v, want ok %v", c.listen, c.token, err, c.ok)
		}
	}
}

// TestReadTimeoutLetsTheLargestBodyIn: serve reads a request within a minute plus a second per MiB
// of the largest body it takes, so a client uploading at 1 MiB/s gets a body at the 100 MiB
// --body-limit in; a flat minute needed 1.7 MB/s.
func TestReadTimeoutLetsTheLargestBodyIn(t *testing.T) {
	for limit, want := range map[int64]time.Duration{
		8 << 20:   68 * time.Second,  // the default --batch-body-limit
		100 << 20: 160 * time.Second, // the largest --body-limit
	} {
		if got := readTimeout(limit); got != want {
			t.Errorf("readTimeout(%d MiB) = %s, want %s", limit>>20, got, want)
		}
	}
}

// TestReadTimeoutOfAHugeBatchBodyLimit: --batch-body-limit has no upper bound (a
// ByteSize takes up to 2^62 bytes), and readTimeout adds a second per MiB in int64 nanoseconds:
// from about 8.8 PiB it overflows, and a ReadTimeout <= 0 is no read timeout at all.
func TestReadTimeoutOfAHugeBatchBodyLimit(t *testing.T) {
	t.Parallel()
	var b config.ByteSize
	if err := b.Set("1073741824GiB"); err != nil { // accepted by the flag
		t.Fatal(err)
	}
	if got := readTimeout(int64(b)); got <= 0 {
		t.Fatalf("readTimeout(--batch-body-limit %s) = %s: no read timeout at all", b, got)
	}
}
