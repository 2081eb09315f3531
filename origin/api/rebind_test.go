package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestNoTokenAnswersLoopbackHostsOnly: without tokens the API is open to whoever reaches its
// loopback listener, and a web page reaches it too once its name is re-resolved to 127.0.0.1 (DNS
// rebinding): the browser then sends the page's name as Host, and may create a subscriber that
// receives every event. Such a request is refused and writes nothing; loopback names work.
func TestNoTokenAnswersLoopbackHostsOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	port := e.url[strings.LastIndexByte(e.url, ':'):]
	create := func(host string) int {
		req, err := http.NewRequest(http.MethodPost, e.url+"/v1/subscribers",
			strings.NewReader(`{"url":"https://attacker.example/h","events":["*"]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, host := range []string{"rebind.attacker.example" + port, "rebind.attacker.example", "10.0.0.1" + port} {
		if got := create(host); got != http.StatusUnauthorized {
			t.Errorf("Host %s: status %d, want 401", host, got)
		}
	}
	if r := e.do("GET", "/v1/subscribers", nil); !strings.Contains(string(r.body), `"subscribers":[]`) {
		t.Fatalf("subscribers after the refused requests: %s", r.body)
	}
	for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "LocalHost", "localhost." + port, "[::1]" + port, "[::1]", "127.0.0.2"} {
		if got := create(host); got != http.StatusCreated {
			t.Errorf("Host %s: status %d, want 201", host, got)
		}
	}
}
