package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/api"
)

// TestAnEmptyEventIDIsRefused: an event sent with "id": "" (a client templating {"id":"$ID"} with
// ID unset) took a generated id, as an absent one does, so every retry stored the event again: its
// idempotency key silently lost. It is a 422 naming the field, single or in a batch, on the fast
// decoding path and on encoding/json's (an escaped type takes the latter), and nothing is stored;
// an absent id is still generated.
func TestAnEmptyEventIDIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "s", URL: "https://s.example/hook", Events: []string{"*"}})
	for _, c := range []struct{ path, body, field string }{
		{"/v1/events", `{"id":"","type":"a.b","data":1}`, "id"},
		{"/v1/events", `{"type":"a.b","data":1,"id":""}`, "id"},
		{"/v1/events", `{"id":"","type":"a\u002eb","data":1}`, "id"},
		{"/v1/events", ` {"id" : "" ,"type":"a.b","data":"é"}`, "id"},
		{"/v1/events/batch", `{"events":[{"id":"e0","type":"a.b","data":1},{"type":"a.b","data":2},{"id":"","type":"a.b","data":3}]}`, "events[2].id"},
		{"/v1/events/batch", `{"events":[{"type":"a.b","data":1},{"id":"","type":"a\u002eb","data":2}]}`, "events[1].id"},
	} {
		t.Run(c.path+" "+c.body, func(t *testing.T) {
			for range 2 { // a retry is refused as the first try was
				e.do("POST", c.path, c.body).wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, c.field)
			}
		})
	}
	st, err := e.store.Stats(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Depth != 0 {
		t.Errorf("refused events were stored: depth %d", st.Depth)
	}

	// Absent, the id is generated, on both decoding paths.
	for _, body := range []string{`{"type":"a.b","data":1}`, `{"type":"a\u002eb","data":1}`} {
		var res api.EmitResult
		e.do("POST", "/v1/events", body).want(t, http.StatusAccepted).decode(t, &res)
		if res.ID == "" {
			t.Errorf("%s: no id generated: %+v", body, res)
		}
	}
	var res api.BatchResult
	e.do("POST", "/v1/events/batch", `{"events":[{"type":"a.b","data":1},{"type":"a\u002eb","data":1}]}`).want(t, http.StatusAccepted).decode(t, &res)
	if len(res.Results) != 2 || res.Results[0].ID == "" || res.Results[1].ID == "" {
		t.Errorf("batch without ids: %+v", res)
	}
}

// TestAnEmptySubscriberIDIsRefused: a subscriber created with "id": "" took a generated id, so a
// provisioning script re-run with ID unset added the subscriber again instead of failing on the
// one it made (the CLI's subscribers add --id "" is a usage error for this). It is a 422 naming
// id, and nothing is created; an absent id is still generated.
func TestAnEmptySubscriberIDIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/v1/subscribers", `{"id":"","url":"https://x.example/h","events":["*"]}`).
		wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "id")
	var list api.SubscriberList
	e.do("GET", "/v1/subscribers", nil).want(t, http.StatusOK).decode(t, &list)
	if len(list.Subscribers) != 0 {
		t.Fatalf("a refused subscriber was created: %+v", list.Subscribers)
	}
	if s := e.addSubscriber(api.SubscriberRequest{URL: "https://x.example/h", Events: []string{"*"}}); s.ID == "" {
		t.Fatal("no id generated for a subscriber without one")
	}
}
