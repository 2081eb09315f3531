//go:build unix

package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/edgehook/edgehook/internal/rawserve"
)

// TestH1ReadsAnAnswerSentBeforeAFailedWrite: with the smallest socket buffers an 8 KiB request
// does not fit, and the receiver answers 503 after the headers and closes with the rest unread,
// so the write fails partway; the answer already sent is still read and returned.
func TestH1ReadsAnAnswerSentBeforeAFailedWrite(t *testing.T) {
	smallBuffer := func(opt int) func(string, string, syscall.RawConn) error {
		return func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, 1) })
			return errors.Join(err, serr)
		}
	}
	lc := net.ListenConfig{Control: smallBuffer(syscall.SO_RCVBUF)}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rawserve.Each(t, ln, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 30\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
	})
	d := &net.Dialer{Timeout: 5 * time.Second, Control: smallBuffer(syscall.SO_SNDBUF)}
	h := New(&http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}, d)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ln.Addr().String()+"/hook", bytes.NewReader(make([]byte, maxBody)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.RoundTrip(req)
	if err != nil {
		t.Fatalf("%v, want the 503", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "30" {
		t.Fatalf("%d Retry-After %q, want 503 and 30", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
