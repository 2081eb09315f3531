package httpupstream_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
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

// TestDoDecodes: with no Accept-Encoding of the request's own, Do asks for gzip; a gzip or br
// answer is relayed decoded, without its Content-Encoding and Content-Length, also when a record's
// own Accept-Encoding asked for something else; any other coding is relayed as it came, as by
// workerd's fetch, which the Worker uses (see decode). Over net/http's transport and over h1's,
// which does not decode.
func TestDoDecodes(t *testing.T) {
	const text = "database is down"
	var gz, br, zl bytes.Buffer
	for _, w := range []io.WriteCloser{gzip.NewWriter(&gz), brotli.NewWriter(&br), zlib.NewWriter(&zl)} {
		w.Write([]byte(text))
		w.Close()
	}
	answers := map[string]struct {
		coding []string
		body   []byte
	}{
		"/gzip":       {[]string{"gzip"}, gz.Bytes()},
		"/br":         {[]string{"br"}, br.Bytes()},
		"/br-garbage": {[]string{"br"}, append(slices.Clip(br.Bytes()), "garbage"...)},
		"/not-br":     {[]string{"br"}, []byte("not brotli")},
		"/deflate":    {[]string{"deflate"}, zl.Bytes()},
		"/upper-case": {[]string{"GZIP"}, gz.Bytes()},
		"/stacked":    {[]string{"gzip, br"}, gz.Bytes()},
		"/two-lines":  {[]string{"gzip", "br"}, gz.Bytes()},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answers[r.URL.Path]
		w.Header().Set("X-Asked", r.Header.Get("Accept-Encoding"))
		w.Header()["Content-Encoding"] = a.coding
		w.WriteHeader(500)
		w.Write(a.body)
	}))
	defer srv.Close()
	d := &net.Dialer{}
	viaH1 := h1.New(&http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}, d)
	defer viaH1.CloseIdleConnections()
	askBr := relay.Header{{Name: "accept-encoding", Value: "br"}}
	for _, c := range []*httpupstream.Client{httpupstream.New(nil), httpupstream.New(viaH1)} {
		for _, tc := range []struct {
			path         string
			header       relay.Header
			asked, body  string
			contentCoded string
		}{
			{"/gzip", relay.Header{}, "gzip", text, ""},
			{"/gzip", askBr, "br", text, ""},
			{"/br", askBr, "br", text, ""},
			{"/br-garbage", askBr, "br", text, ""}, // what decoded before the failure
			{"/not-br", askBr, "br", "", ""},
			{"/deflate", relay.Header{}, "gzip", zl.String(), "deflate"},
			{"/upper-case", relay.Header{}, "gzip", gz.String(), "GZIP"},
			{"/stacked", relay.Header{}, "gzip", gz.String(), "gzip, br"},
			{"/two-lines", relay.Header{}, "gzip", gz.String(), "gzip, br"},
		} {
			resp, err := c.Do(context.Background(), &relay.UpstreamRequest{URL: srv.URL + tc.path, Header: tc.header, Body: []byte("b"), Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != 500 || resp.Header.Get("X-Asked") != tc.asked || string(resp.Body) != tc.body ||
				resp.Header.Get("Content-Encoding") != tc.contentCoded {
				t.Errorf("%s, request headers %v: %d, asked %q, Content-Encoding %q, body %q; want 500, %q, %q, %q", tc.path,
					tc.header, resp.Status, resp.Header.Get("X-Asked"), resp.Header.Get("Content-Encoding"), resp.Body, tc.asked, tc.contentCoded, tc.body)
			}
		}
	}
}
