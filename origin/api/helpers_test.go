package api_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/internal/syncbuf"
	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one real server on 127.0.0.1 over a fresh SQLite file.
type env struct {
	t     *testing.T
	url   string
	store *store.Store
	srv   *api.Server
	token string
	logs  *syncbuf.Buffer
	path  string
}

type setup struct {
	store  store.Options
	api    api.Options
	tokens []string
}

func newEnv(t *testing.T, opts ...func(*setup)) *env {
	t.Helper()
	var s setup
	s.store.Path = filepath.Join(t.TempDir(), "edgehook.db")
	for _, o := range opts {
		o(&s)
	}
	st, err := store.Open(context.Background(), s.store)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	s.api.Store, s.api.Registry, s.api.Tokens = st, reg, s.tokens
	s.api.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := api.New(s.api)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv) // listens on 127.0.0.1
	e := &env{t: t, url: hs.URL, store: st, srv: srv, logs: logs, path: s.store.Path}
	if len(s.tokens) > 0 {
		e.token = s.tokens[0]
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
		hs.Close()
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

// response is a finished request.
type response struct {
	status int
	header http.Header
	body   []byte
}

// apiError decodes the error shape.
func (r response) apiError(t *testing.T) api.Error {
	t.Helper()
	var e api.Error
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body %q is not {code, message, field}: %v", r.body, err)
	}
	if e.Code == "" || e.Message == "" {
		t.Fatalf("error body %q lacks code or message", r.body)
	}
	return e
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %q: %v", r.body, err)
	}
}

// lockDatabase takes the database's write lock from another connection, as another process
// would, until unlock (or the test's end).
func (e *env) lockDatabase() (unlock func()) {
	e.t.Helper()
	db, err := sql.Open("sqlite", "file:"+e.path)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		e.t.Fatal(err)
	}
	return func() {
		e.t.Helper()
		if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
			e.t.Fatal(err)
		}
	}
}

// do sends a request with a JSON body (a string is sent as is) and the env's token.
func (e *env) do(method, path string, body any, hdr ...string) response {
	e.t.Helper()
	r, err := e.send(method, path, body, hdr...)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// send is do for any goroutine: it returns its error instead of failing the test.
func (e *env) send(method, path string, body any, hdr ...string) (response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		return response{}, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: data}, err
}

// want fails unless r has the status.
func (r response) want(t *testing.T, status int) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	return r
}

// wantError checks an error response: status, code and field.
func (r response) wantError(t *testing.T, status int, code, field string) api.Error {
	t.Helper()
	r.want(t, status)
	e := r.apiError(t)
	if e.Code != code || e.Field != field {
		t.Fatalf("error %+v, want code %q field %q", e, code, field)
	}
	return e
}

// addSubscriber creates a subscriber through the API.
func (e *env) addSubscriber(req api.SubscriberRequest) api.SubscriberWithSecret {
	e.t.Helper()
	var s api.SubscriberWithSecret
	e.do("POST", "/v1/subscribers", req).want(e.t, http.StatusCreated).decode(e.t, &s)
	return s
}
