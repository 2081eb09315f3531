package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestClientGoneWhileDatabaseLockedIsNotInternal: a client that gives up while its emit waits for
// another process's write lock is recorded as 499 (client closed), not as a 500 "internal" error
// logged at ERROR: an operator alerting on 5xx must not be paged for a client's timeout.
func TestClientGoneWhileDatabaseLockedIsNotInternal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(s *setup) { s.store.BusyTimeout = time.Second })
	defer e.lockDatabase()()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/events", strings.NewReader(`{"type":"a","data":1}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the request was answered %d before the client's timeout", resp.StatusCode)
	}
	var line string
	for deadline := time.Now().Add(10 * time.Second); line == ""; time.Sleep(20 * time.Millisecond) {
		for _, l := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(l, `"msg":"request"`) && strings.Contains(l, `"route":"/v1/events"`) {
				line = l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access log line for the request within 10s:\n%s", e.logs.String())
		}
	}
	if !strings.Contains(line, `"status":499`) || strings.Contains(e.logs.String(), `"level":"ERROR"`) {
		t.Fatalf("a client that gave up, want status 499 and no error logged:\n%s", e.logs.String())
	}
}
