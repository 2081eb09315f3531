package main

import "testing"

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
