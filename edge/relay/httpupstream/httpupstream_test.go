package httpupstream_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/httpupstream"
	"github.com/edgehook/edgehook/internal/h1"
	"github.com/edgehook/edgehook/shared/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDo(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Retry-After", "7")
			w.Header().Add("X-Multi", "a")
			w.Header().Add("X-Multi", "b")
			w.WriteHeader(503)
			_, _ = w.Write([]byte(strings.Repeat("z", 3*wire.MaxExcerptBytes)))
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/hang":
			_, _ = io.ReadAll(r.Body) // the server notices the client leaving only once the body is read
			select {
			case <-r.Context().Done():
			case <-release:
			}
		default:
			t.Errorf("unexpected %s", r.URL.Path)
		}
	}))
	defer srv.Close()
	defer close(release)
	c := httpupstream.New(nil)
	do := func(path string, timeout time.Duration) (*relay.UpstreamResponse, error) {
		return c.Do(context.Background(), &relay.UpstreamRequest{URL: srv.URL + path, Header: relay.Header{{Name: "x-a", Value: "1"}}, Body: []byte("b"), Timeout: timeout})
	}

	resp, err := do("/big", time.Second)
	if err != nil || resp.Status != 503 || len(resp.Body) != wire.MaxExcerptBytes || resp.Header.Get("Retry-After") != "7" || resp.Header.Get("X-Multi") != "a, b" {
		t.Errorf("big: %v, %+v", err, resp)
	}
	if resp, err := do("/redirect", time.Second); err != nil || resp.Status != http.StatusFound {
		t.Errorf("redirect followed or failed: %v, %+v", err, resp)
	}
	if _, err := do("/hang", 150*time.Millisecond); !errors.Is(err, relay.ErrUpstreamTimeout) {
		t.Errorf("hang: %v, want ErrUpstreamTimeout", err)
	}
	srv.Close()
	if _, err := do("/big", time.Second); err == nil || errors.Is(err, relay.ErrUpstreamTimeout) {
		t.Errorf("closed server: %v, want a non-timeout error", err)
	}
}

// TestDoDecodesGzip: with no Accept-Encoding of the request's own, Do asks for gzip; a gzip
// answer is relayed decoded, without its Content-Encoding and Content-Length, also when a record's
// own Accept-Encoding asked for something else (as the Fetch API does, which the Worker uses). Over
// net/http's transport and over h1's, which does not decode.
func TestDoDecodesGzip(t *testing.T) {
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write([]byte("database is down"))
	zw.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Asked", r.Header.Get("Accept-Encoding"))
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(500)
		w.Write(zipped.Bytes())
	}))
	defer srv.Close()
	d := &net.Dialer{}
	viaH1 := h1.New(&http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}, d)
	defer viaH1.CloseIdleConnections()
	for _, c := range []*httpupstream.Client{httpupstream.New(nil), httpupstream.New(viaH1)} {
		doGzip(t, c, srv.URL)
	}
}

// doGzip checks c against the test server at url, whose answer is gzipped.
func doGzip(t *testing.T, c *httpupstream.Client, url string) {
	t.Helper()
	for _, tc := range []struct {
		header       relay.Header
		asked, body  string
		contentCoded string
	}{
		{relay.Header{}, "gzip", "database is down", ""},
		{relay.Header{{Name: "accept-encoding", Value: "br"}}, "br", "database is down", ""},
	} {
		resp, err := c.Do(context.Background(), &relay.UpstreamRequest{URL: url, Header: tc.header, Body: []byte("b"), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 500 || resp.Header.Get("X-Asked") != tc.asked || string(resp.Body) != tc.body ||
			resp.Header.Get("Content-Encoding") != tc.contentCoded {
			t.Errorf("request headers %v: %d, asked %q, Content-Encoding %q, body %q; want 500, %q, %q, %q",
				tc.header, resp.Status, resp.Header.Get("X-Asked"), resp.Header.Get("Content-Encoding"), resp.Body, tc.asked, tc.contentCoded, tc.body)
		}
	}
}
