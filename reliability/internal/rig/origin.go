package rig

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// JSONLogs are the global flags every process gets: JSON logs at debug level, so WaitLog can
// parse them and the log-grep test sees everything the binary can say.
var JSONLogs = []string{"--log-format", "json", "--log-level", "debug"}

// Origin is a running `edgehook serve`.
type Origin struct {
	*Proc
	URL   string // http://127.0.0.1:<port>
	DB    string
	Token string // sent as the bearer token by Do when set
}

// Serve starts `edgehook serve` on a fresh loopback port over db with extra flags and waits until
// it has logged that it serves.
func Serve(t testing.TB, db string, extra ...string) *Origin {
	t.Helper()
	args := append([]string{"serve", "--db", db, "--listen", "127.0.0.1:0"}, JSONLogs...)
	p := Start(t, Command{Name: "serve", Args: append(args, extra...)})
	return &Origin{Proc: p, URL: p.Listening(t, "serving"), DB: db}
}

// Edge starts `edgehook edge local` on a fresh loopback port with the KV file and edge secret.
func Edge(t testing.TB, kvFile, secret string, extra ...string) (*Proc, string) {
	t.Helper()
	args := append([]string{"edge", "local", "--listen", "127.0.0.1:0", "--allow-network", "127.0.0.0/8", "--kv", kvFile, "--wasm", WASM(t)}, JSONLogs...)
	p := Start(t, Command{Name: "edge", Args: append(args, extra...), Env: []string{"EDGEHOOK_EDGE_SECRET=" + secret}})
	return p, p.Listening(t, "local edge listening")
}

// ExportKV writes the edge records of db's subscribers to a file in dir and returns its path.
func ExportKV(t testing.TB, db, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "subscribers.json")
	MustRun(t, "edge", "export-kv", "--db", db, "--out", out)
	return out
}

// Response is an API answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// APIError is the API's error body.
type APIError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

// Error decodes the body as the API's JSON error; ok is false when it is not one.
func (r Response) Error() (e APIError, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Code == "" || e.Message == "" {
		return e, false
	}
	return e, strings.HasPrefix(r.Header.Get("Content-Type"), "application/json")
}

// client has a timeout so a hung server fails the test instead of hanging it.
var client = &http.Client{Timeout: 30 * time.Second}

// Do sends a request to the API. A non-nil body is sent as application/json unless header sets
// another Content-Type. Transport errors fail the test.
func (o *Origin) Do(t testing.TB, method, path string, body []byte, header http.Header) Response {
	t.Helper()
	r, err := o.Try(method, path, body, header)
	if err != nil {
		t.Fatalf("rig: %s %s: %v", method, path, err)
	}
	return r
}

// Try is Do that returns transport errors (for requests made while the server may be killed).
func (o *Origin) Try(method, path string, body []byte, header http.Header) (Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, o.URL+path, rd)
	if err != nil {
		return Response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// JSON sends v as JSON and decodes a 2xx answer into out (when not nil); any other status fails
// the test.
func (o *Origin) JSON(t testing.TB, method, path string, v, out any) {
	t.Helper()
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	r := o.Do(t, method, path, body, nil)
	if r.Status/100 != 2 {
		t.Fatalf("rig: %s %s: %d %s", method, path, r.Status, r.Body)
	}
	if out != nil {
		if err := json.Unmarshal(r.Body, out); err != nil {
			t.Fatalf("rig: %s %s: decoding %s: %v", method, path, r.Body, err)
		}
	}
}

// Subscriber is the part of the API's subscriber answer the suite uses.
type Subscriber struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
	State  string `json:"state"`
}

// AddSubscriber creates a subscriber through the API from a request body (see
// origin/api.SubscriberRequest) and returns it with its secret.
func (o *Origin) AddSubscriber(t testing.TB, req map[string]any) Subscriber {
	t.Helper()
	var s Subscriber
	o.JSON(t, http.MethodPost, "/v1/subscribers", req, &s)
	return s
}
