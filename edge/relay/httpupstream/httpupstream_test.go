package httpupstream_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/httpupstream"
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
