package api_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/edgehook/edgehook/origin/api"
)

// TestWakeHook: the requests that can make deliveries due or change which subscribers are active
// call Options.Wake, once, before their answer is sent; reads, emits, rotations and failed
// requests do not.
func TestWakeHook(t *testing.T) {
	t.Parallel()
	var wakes atomic.Int32
	e := newEnv(t, func(s *setup) { s.api.Wake = func() { wakes.Add(1) } })
	sub := api.SubscriberRequest{ID: "s", URL: "https://s.example/hook", Events: []string{"*"}}
	var dead string // a dead delivery's id, made before the step that retries it
	steps := []struct {
		method, path string
		body         any
		status       int
		wake         bool
	}{
		{"POST", "/v1/subscribers", sub, http.StatusCreated, true},
		{"POST", "/v1/subscribers", sub, http.StatusConflict, false},
		{"GET", "/v1/subscribers", nil, http.StatusOK, false},
		{"PATCH", "/v1/subscribers/s", `{"max_in_flight":5}`, http.StatusOK, true},
		{"PATCH", "/v1/subscribers/nobody", `{"burst":1}`, http.StatusNotFound, false},
		{"POST", "/v1/events", `{"id":"one","type":"a","data":{}}`, http.StatusAccepted, false},
		{"POST", "/v1/events/batch", `{"events":[{"id":"two","type":"a","data":{}}]}`, http.StatusAccepted, false},
		{"POST", "/v1/subscribers/s/pause", nil, http.StatusOK, true},
		{"POST", "/v1/subscribers/s/resume", nil, http.StatusOK, true},
		{"POST", "/v1/subscribers/nobody/resume", nil, http.StatusNotFound, false},
		{"POST", "/v1/subscribers/s/rotate-secret", nil, http.StatusOK, false},
		{"POST", "/v1/deliveries/{dead}/retry", nil, http.StatusOK, true},
		{"POST", "/v1/deliveries/{dead}/retry", nil, http.StatusConflict, false},
		{"POST", "/v1/subscribers/s/replay", nil, http.StatusOK, true},
		{"POST", "/v1/subscribers/s/replay", `{"from":"x"}`, http.StatusUnprocessableEntity, false},
		{"GET", "/v1/deliveries", nil, http.StatusOK, false},
		{"GET", "/v1/stats", nil, http.StatusOK, false},
		{"DELETE", "/v1/subscribers/s", nil, http.StatusNoContent, true},
		{"DELETE", "/v1/subscribers/s", nil, http.StatusNotFound, false},
	}
	for _, st := range steps {
		path := st.path
		if path == "/v1/deliveries/{dead}/retry" {
			if dead == "" {
				dead = deadDelivery(t, e)
			}
			path = "/v1/deliveries/" + dead + "/retry"
		}
		before := wakes.Load()
		e.do(st.method, path, st.body).want(t, st.status)
		want := before
		if st.wake {
			want++
		}
		if got := wakes.Load(); got != want {
			t.Errorf("%s %s (%d): %d wakes, want %d", st.method, st.path, st.status, got-before, want-before)
		}
	}
}
