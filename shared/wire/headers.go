// Package wire is the contract between the origin and the edge: header names, edge outcomes, the KV
// subscriber record, KV key naming, event types and patterns, and Retry-After parsing.
//
// It imports only the standard library (and never net/http) so it builds for GOOS=js and
// GOOS=wasip1 and stays small inside the relay's WASM builds.
package wire

// Subscriber-facing headers of the Standard Webhooks profile.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// Hop headers: set by the origin on a request to the edge, covered by the hop signature, and
// stripped by the edge before it forwards to the subscriber.
const (
	HeaderDeliveryID   = "Edgehook-Delivery-Id"
	HeaderSubscriberID = "Edgehook-Subscriber-Id"
	HeaderEventType    = "Edgehook-Event-Type"
	HeaderCoalesceKey  = "Edgehook-Coalesce-Key"
	HeaderAttempt      = "Edgehook-Attempt"
	HeaderHopTimestamp = "Edgehook-Timestamp"
	HeaderHopSignature = "Edgehook-Signature"
)

// HopHeaders lists every hop header, so the edge can strip them all before forwarding.
var HopHeaders = []string{
	HeaderDeliveryID, HeaderSubscriberID, HeaderEventType, HeaderCoalesceKey,
	HeaderAttempt, HeaderHopTimestamp, HeaderHopSignature,
}

// Headers of the edge's answer to the origin. The status code and Retry-After are the subscriber's
// own (or the edge's, for outcomes that never reached the subscriber).
const (
	HeaderOutcome         = "Edgehook-Outcome"
	HeaderUpstreamLatency = "Edgehook-Upstream-Latency-Ms"
	HeaderRetryAfter      = "Retry-After"
	// HeaderMarkFailed is on a forwarded 2xx whose marks the edge could not write (a KV write
	// failed: its daily quota, an outage): MarkDedup, MarkCoalesce or both, comma-separated.
	// Until they can be written, a retry of the delivery is forwarded again and the key is not
	// coalesced.
	HeaderMarkFailed = "Edgehook-Mark-Failed"
)

// The marks HeaderMarkFailed names.
const (
	MarkDedup    = "dedup"
	MarkCoalesce = "coalesce"
)

// MaxExcerptBytes bounds how much of a subscriber's response body is relayed and kept in the
// attempt log.
const MaxExcerptBytes = 2048

// MaxAnswerHeaderBytes bounds a subscriber's status line and headers, as workerd's fetch does (it
// fails on a response head over 128 KiB). The origin and the local edge read no more either: an
// answer the Worker cannot read is unreachable everywhere, and a hostile endpoint's endless head
// costs a send 128 KiB, not the 10 MiB of Go's default.
const MaxAnswerHeaderBytes = 128 << 10
