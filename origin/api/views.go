package api

import (
	"encoding/json"
	"time"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
)

// The JSON shapes the API returns. The command line prints the same shapes, so a script sees one
// format whether it talks to the server or to the database file.

// Subscriber is a subscriber as returned by the API. It never carries secret text: only the
// secrets' dates, so an operator can see a rotation in progress.
type Subscriber struct {
	ID           string             `json:"id"`
	URL          string             `json:"url"`
	Events       []string           `json:"events"`
	Profile      store.Profile      `json:"profile"`
	LegacyPrefix string             `json:"legacy_prefix,omitempty"`
	Mode         store.Mode         `json:"mode"`
	RatePerSec   float64            `json:"rate_per_sec"`
	Burst        int                `json:"burst"`
	MaxInFlight  int                `json:"max_in_flight"`
	TimeoutMS    int64              `json:"timeout_ms"`
	Headers      map[string]string  `json:"headers,omitempty"`
	Coalesce     *wire.CoalesceRule `json:"coalesce,omitempty"`
	State        store.State        `json:"state"`
	StateReason  string             `json:"state_reason,omitempty"`
	Secrets      []SecretInfo       `json:"secrets"`
	CreatedAt    time.Time          `json:"created_at"`
	UpdatedAt    time.Time          `json:"updated_at"`
}

// SecretInfo describes one signing secret without revealing it.
type SecretInfo struct {
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// SubscriberList is the answer to GET /v1/subscribers.
type SubscriberList struct {
	Subscribers []Subscriber `json:"subscribers"`
}

// NewSubscriberList renders subs.
func NewSubscriberList(subs []*store.Subscriber) SubscriberList {
	v := SubscriberList{Subscribers: make([]Subscriber, len(subs))}
	for i, s := range subs {
		v.Subscribers[i] = NewSubscriber(s)
	}
	return v
}

// SubscriberWithSecret is the answer to create and rotate-secret: the only two places a secret is
// ever shown.
type SubscriberWithSecret struct {
	Subscriber
	Secret string `json:"secret"`
}

// NewSubscriber renders s.
func NewSubscriber(s *store.Subscriber) Subscriber {
	v := Subscriber{
		ID: s.ID, URL: s.URL, Profile: s.Profile, LegacyPrefix: s.LegacyPrefix, Mode: s.Mode,
		RatePerSec: s.RatePerSec, Burst: s.Burst, MaxInFlight: s.MaxInFlight, TimeoutMS: s.TimeoutMS,
		Headers: s.Headers, Coalesce: s.Coalesce, State: s.State, StateReason: s.StateReason,
		CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC(),
		Events: make([]string, len(s.Events)), Secrets: make([]SecretInfo, len(s.Secrets)),
	}
	for i, p := range s.Events {
		v.Events[i] = string(p)
	}
	for i, sec := range s.Secrets {
		v.Secrets[i] = SecretInfo{CreatedAt: sec.CreatedAt.UTC(), ExpiresAt: utc(sec.ExpiresAt)}
	}
	return v
}

// NewSubscriberWithSecret renders s with its newest secret, for create and rotate answers.
func NewSubscriberWithSecret(s *store.Subscriber) SubscriberWithSecret {
	v := SubscriberWithSecret{Subscriber: NewSubscriber(s)}
	if active := s.ActiveSecrets(time.Now()); len(active) > 0 {
		v.Secret = active[0].String()
	}
	return v
}

// Delivery is one event for one subscriber, with its attempts when fetched alone.
type Delivery struct {
	ID            string       `json:"id"`
	EventID       string       `json:"event_id"`
	EventType     string       `json:"event_type"`
	SubscriberID  string       `json:"subscriber_id"`
	Status        store.Status `json:"status"`
	Reason        string       `json:"reason,omitempty"`
	CoalesceKey   string       `json:"coalesce_key,omitempty"`
	Attempts      int          `json:"attempts"`
	NextAttemptAt time.Time    `json:"next_attempt_at,omitzero"`
	LastStatus    int          `json:"last_status,omitempty"`
	LastError     string       `json:"last_error,omitempty"`
	CreatedAt     time.Time    `json:"created_at"`
	UpdatedAt     time.Time    `json:"updated_at"`
	DeliveredAt   time.Time    `json:"delivered_at,omitzero"`
	AttemptLog    []Attempt    `json:"attempt_log,omitempty"`
}

// Attempt is one send of a delivery.
type Attempt struct {
	At        time.Time `json:"at"`
	Number    int       `json:"number"`
	Status    int       `json:"status,omitempty"`
	LatencyMS int64     `json:"latency_ms"`
	Outcome   string    `json:"outcome,omitempty"`
	Error     string    `json:"error,omitempty"`
	Excerpt   string    `json:"excerpt,omitempty"`
}

// NewDelivery renders d (with its attempt log, if the store filled it).
func NewDelivery(d *store.Delivery) Delivery {
	v := Delivery{
		ID: d.ID, EventID: d.EventID, EventType: d.EventType, SubscriberID: d.SubscriberID,
		Status: d.Status, Reason: d.Reason, CoalesceKey: d.CoalesceKey, Attempts: d.Attempts,
		LastStatus: d.LastStatus, LastError: d.LastError, CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(),
		DeliveredAt: utc(d.DeliveredAt),
	}
	if d.Status == store.StatusPending {
		v.NextAttemptAt = utc(d.NextAttemptAt)
	}
	for _, a := range d.AttemptLog {
		v.AttemptLog = append(v.AttemptLog, Attempt{At: a.At.UTC(), Number: a.Number, Status: a.Status,
			LatencyMS: a.LatencyMS, Outcome: a.Outcome, Error: a.Error, Excerpt: a.Excerpt})
	}
	return v
}

// DeliveryPage is one page of a delivery listing; pass NextCursor as ?cursor= for the next.
type DeliveryPage struct {
	Deliveries []Delivery `json:"deliveries"`
	NextCursor string     `json:"next_cursor,omitempty"`
}

// NewDeliveryPage renders p.
func NewDeliveryPage(p *store.DeliveryPage) DeliveryPage {
	v := DeliveryPage{Deliveries: make([]Delivery, len(p.Deliveries)), NextCursor: p.NextCursor}
	for i := range p.Deliveries {
		v.Deliveries[i] = NewDelivery(&p.Deliveries[i])
	}
	return v
}

// Event is a stored event: what every subscriber of its type is sent.
type Event struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	CoalesceKey string          `json:"coalesce_key,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	Data        json.RawMessage `json:"data"` // the webhook body (encoding/json compacts it)
}

// NewEvent renders e.
func NewEvent(e *store.Event) Event {
	return Event{ID: e.ID, Type: e.Type, CoalesceKey: e.CoalesceKey, CreatedAt: e.CreatedAt.UTC(), Data: e.Body}
}

// EmitResult is the answer to one emitted event.
type EmitResult struct {
	ID         string `json:"id"`
	Deliveries int    `json:"deliveries"`
	// Duplicate is true when the id was already stored with the same event: nothing new was
	// written and Deliveries is the original count.
	Duplicate  bool `json:"duplicate,omitempty"`
	Superseded int  `json:"superseded,omitempty"`
}

// NewEmitResult renders r.
func NewEmitResult(r store.EmitResult) EmitResult {
	return EmitResult{ID: r.EventID, Deliveries: r.Deliveries, Duplicate: r.Duplicate, Superseded: r.Superseded}
}

// Stats is the queue as a whole and per subscriber.
type Stats struct {
	Depth       int64             `json:"depth"`
	Subscribers []SubscriberStats `json:"subscribers"`
}

// SubscriberStats is one subscriber's queue.
type SubscriberStats struct {
	SubscriberID        string                 `json:"subscriber_id"`
	State               store.State            `json:"state"`
	Counts              map[store.Status]int64 `json:"counts"`
	OldestDueAgeSeconds float64                `json:"oldest_due_age_seconds"`
	DeliveredLastMinute int64                  `json:"delivered_last_minute"`
	PausedUntil         time.Time              `json:"paused_until,omitzero"`
	CircuitOpen         bool                   `json:"circuit_open"`
}

// NewStats renders st.
func NewStats(st *store.Stats) Stats {
	v := Stats{Depth: st.Depth, Subscribers: make([]SubscriberStats, len(st.Subscribers))}
	for i, s := range st.Subscribers {
		v.Subscribers[i] = SubscriberStats{SubscriberID: s.SubscriberID, State: s.State, Counts: s.Counts,
			OldestDueAgeSeconds: s.OldestDueAge.Seconds(), DeliveredLastMinute: s.DeliveredLast,
			PausedUntil: utc(s.PausedUntil), CircuitOpen: s.CircuitOpen}
	}
	return v
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}
