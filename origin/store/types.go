package store

import (
	"time"

	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// Profile selects how deliveries to a subscriber are signed.
type Profile string

// Signing profiles.
const (
	// ProfileStandard sends Standard Webhooks headers (webhook-id, webhook-timestamp,
	// webhook-signature with one signature per active secret).
	ProfileStandard Profile = "standard"
	// ProfileLegacy sends X-<Prefix>-Timestamp and X-<Prefix>-Signature. It carries one signature,
	// so during a rotation it signs with the oldest secret that has not expired: the one the
	// receiver is already configured with. The receiver switches when that secret expires.
	ProfileLegacy Profile = "legacy"
)

// Mode selects the route of a subscriber's deliveries.
type Mode string

// Delivery modes.
const (
	ModeDirect Mode = "direct" // the origin posts to the subscriber itself
	ModeEdge   Mode = "edge"   // the origin posts to the edge, which forwards
)

// State is a subscriber's lifecycle state.
type State string

// Subscriber states.
const (
	StateActive   State = "active"   // deliveries are queued and sent
	StatePaused   State = "paused"   // deliveries are queued but not sent (operator pause)
	StateDisabled State = "disabled" // no new deliveries; pending ones are held (e.g. after a 410)
)

// Defaults for subscriber settings left zero at creation.
const (
	DefaultRatePerSec  = 10.0
	DefaultBurst       = 20
	DefaultMaxInFlight = 16
	DefaultTimeoutMS   = int64(wire.DefaultTimeout / time.Millisecond)
	MaxRatePerSec      = 100000.0
	MaxBurst           = 100000
	MaxMaxInFlight     = 1000
)

// Secret is one signing secret of a subscriber. A secret with a zero ExpiresAt is current; one with
// ExpiresAt set is the previous secret kept valid during a rotation overlap.
type Secret struct {
	Secret    signature.Secret
	CreatedAt time.Time
	ExpiresAt time.Time // zero: does not expire
}

// Subscriber is a webhook receiver and its delivery settings.
type Subscriber struct {
	ID           string
	URL          string
	Events       wire.Patterns
	Profile      Profile
	LegacyPrefix string // only with ProfileLegacy, e.g. "VVV"
	Mode         Mode
	RatePerSec   float64 // token bucket refill rate
	Burst        int     // token bucket size
	MaxInFlight  int     // concurrent deliveries at most
	TimeoutMS    int64
	Headers      map[string]string  // extra request headers
	Coalesce     *wire.CoalesceRule // nil: no coalescing
	State        State
	StateReason  string // why paused or disabled
	Secrets      []Secret
	CreatedAt    time.Time
	UpdatedAt    time.Time

	ordinal int64 // never given to another subscriber of the database (fanout.go)
}

// Timeout returns the per-request timeout.
func (s *Subscriber) Timeout() time.Duration { return time.Duration(s.TimeoutMS) * time.Millisecond }

// ActiveSecrets returns the secrets valid at now, newest first.
func (s *Subscriber) ActiveSecrets(now time.Time) []signature.Secret {
	out := make([]signature.Secret, 0, len(s.Secrets))
	for _, sec := range s.Secrets {
		if sec.ExpiresAt.IsZero() || sec.ExpiresAt.After(now) {
			out = append(out, sec.Secret)
		}
	}
	return out
}

// LegacySecret returns the secret the legacy profile signs with at now: the oldest one still valid
// (see ProfileLegacy). ok is false when the subscriber has none.
func (s *Subscriber) LegacySecret(now time.Time) (signature.Secret, bool) {
	active := s.ActiveSecrets(now)
	if len(active) == 0 {
		return signature.Secret{}, false
	}
	return active[len(active)-1], true
}

// Record returns the edge's view of the subscriber (the KV record).
func (s *Subscriber) Record() *wire.SubscriberRecord {
	return &wire.SubscriberRecord{URL: s.URL, TimeoutMS: s.TimeoutMS, Headers: s.Headers, Coalesce: s.Coalesce, Active: s.State == StateActive}
}

// SubscriberInput holds the settings of CreateSubscriber and UpdateSubscriber. Zero values take the
// defaults above (on update: keep the current value); see the field comments.
type SubscriberInput struct {
	ID           string // create only; empty: generated "sub_<random>"
	URL          string
	Events       []string
	Profile      Profile // empty: standard
	LegacyPrefix string
	Mode         Mode    // empty: direct
	RatePerSec   float64 // 0: default
	Burst        int     // 0: default
	MaxInFlight  int     // 0: default
	TimeoutMS    int64   // 0: default (8 s)
	Headers      map[string]string
	Coalesce     *wire.CoalesceRule
}

// SubscriberPatch changes some settings of a subscriber; nil fields are left alone.
type SubscriberPatch struct {
	URL          *string
	Events       *[]string
	Profile      *Profile
	LegacyPrefix *string
	Mode         *Mode
	RatePerSec   *float64
	Burst        *int
	MaxInFlight  *int
	TimeoutMS    *int64
	Headers      *map[string]string
	Coalesce     **wire.CoalesceRule // set to a nil pointer value to remove coalescing
}

// Status is a delivery's state.
type Status string

// Delivery states.
const (
	StatusPending    Status = "pending"    // waiting to be sent (first attempt or retry)
	StatusLeased     Status = "leased"     // claimed by an engine, being sent
	StatusDelivered  Status = "delivered"  // acknowledged (2xx, or edge duplicate)
	StatusDead       Status = "dead"       // gave up; see Reason
	StatusSuperseded Status = "superseded" // replaced by a newer event with the same coalesce key
	StatusHeld       Status = "held"       // the subscriber is disabled; kept until it is resumed
)

// Reasons recorded on dead deliveries. Held deliveries carry the reason their subscriber was
// disabled with.
const (
	ReasonMaxAttempts     = "max_attempts"
	ReasonMaxAge          = "max_age"
	ReasonBacklogOverflow = "backlog_overflow"
	// ReasonNewerEvent marks a coalesced delivery in flight when a newer event with its key was
	// emitted: if it comes back unsent it is superseded (supersedeStored), with this reason.
	ReasonNewerEvent = "newer_event"
)

// Event is an emitted event: its body is stored once, as the exact bytes received.
type Event struct {
	ID          string // the caller's id, also the idempotency key and webhook-id
	Type        string
	Body        []byte
	CoalesceKey string // explicit key given at emit, if any
	CreatedAt   time.Time
}

// Delivery is one event for one subscriber.
type Delivery struct {
	ID             string // "dlv_<store id>_<n>": unique across databases, safe as an edge dedup key
	EventID        string
	EventType      string
	SubscriberID   string
	Status         Status
	Reason         string // for dead and held deliveries
	CoalesceKey    string
	Attempts       int
	NextAttemptAt  time.Time
	LastStatus     int // last HTTP status, 0 if none
	LastError      string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	DeliveredAt    time.Time // zero unless delivered
	LeaseExpiresAt time.Time // zero unless leased
	AttemptLog     []Attempt // filled by GetDelivery only
}

// Attempt is one send of a delivery and what came back.
type Attempt struct {
	At        time.Time
	Number    int    // attempt number; 0 for a send that did not count (edge coalesced, a stale failure: Settled.Outdated)
	Status    int    // HTTP status, 0 when no response
	LatencyMS int64  //
	Outcome   string // edge outcome, or the failure class
	Error     string
	Excerpt   string // the first bytes of the response body
}

// EmitInput is one event to emit.
type EmitInput struct {
	ID          string
	Type        string
	Body        []byte // the exact bytes to deliver; must be JSON
	CoalesceKey string // optional; overrides the key taken from the payload
	// BodyChecked optionally proves Body valid JSON (a decoder's wire.CutJSON of exactly these
	// bytes): the store then does not validate it again. Without it the store validates Body.
	BodyChecked wire.CheckedJSON
}

// EmitResult tells what an emit did.
type EmitResult struct {
	EventID    string
	Deliveries int  // deliveries created (for a duplicate: created by the original emit)
	Duplicate  bool // the event id was already stored with the same content; nothing was written
	Superseded int  // older pending deliveries replaced by this one
}

// DeliveryFilter selects deliveries to list. Zero fields do not filter.
type DeliveryFilter struct {
	Status       Status
	SubscriberID string
	EventID      string
	From, To     time.Time // created_at in [From, To)
	Cursor       string    // from a previous page's NextCursor
	Limit        int       // 0: 100; at most 1000
}

// DeliveryPage is one page of deliveries, newest first.
type DeliveryPage struct {
	Deliveries []Delivery
	NextCursor string // empty on the last page
}

// SubscriberStats is the queue of one subscriber.
type SubscriberStats struct {
	SubscriberID  string
	State         State
	Counts        map[Status]int64 // deliveries by status (retained rows only)
	OldestDueAge  time.Duration    // age of the oldest pending delivery that is due; 0 if none
	DeliveredLast int64            // delivered in the last minute
	PausedUntil   time.Time        // zero unless paused by Retry-After
	CircuitOpen   bool
}

// Stats is the whole queue.
type Stats struct {
	Subscribers []SubscriberStats
	Depth       int64 // pending + leased deliveries
}
