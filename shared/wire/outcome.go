package wire

import (
	"fmt"
	"strings"
)

// Outcome is the value of the Edgehook-Outcome header: what the edge did with a request.
type Outcome string

// The edge outcomes. A rejection carries a reason after the colon: Rejected("bad_signature").
const (
	OutcomeForwarded           Outcome = "forwarded"
	OutcomeDuplicate           Outcome = "duplicate"
	OutcomeCoalesced           Outcome = "coalesced"
	OutcomeUpstreamTimeout     Outcome = "upstream_timeout"
	OutcomeUpstreamUnreachable Outcome = "upstream_unreachable"
	rejectedPrefix                     = "rejected:"
)

// Rejection reasons used by the edge.
const (
	ReasonMethod            = "method_not_allowed"
	ReasonBodyTooLarge      = "body_too_large"
	ReasonMissingHeader     = "missing_header"
	ReasonMalformedHeader   = "malformed_header"
	ReasonStaleTimestamp    = "stale_timestamp"
	ReasonBadSignature      = "bad_signature"
	ReasonUnknownSubscriber = "unknown_subscriber"
	ReasonBadRecord         = "bad_record"
	ReasonMisconfigured     = "misconfigured"
	// ReasonKVUnavailable: a KV read failed, so the edge could not decide; the origin retries later.
	ReasonKVUnavailable = "kv_unavailable"
	// ReasonEdgePanic: handling the request panicked inside the Worker.
	ReasonEdgePanic = "edge_panic"
	// ReasonEdgeCrashed: the Worker's Go instance died; the next request starts a new one.
	ReasonEdgeCrashed = "edge_crashed"
	// ReasonBlockedAddress: the subscriber's URL leads to an internal address the edge may not
	// reach. The origin takes it as its own direct sends' refusal: not the subscriber failing.
	ReasonBlockedAddress = "blocked_address"
)

// KnownReason reports whether reason is one of the rejection reasons above. ParseOutcome accepts
// any token, so that an edge newer than the origin may send a new one; what counts rejections by
// reason keeps to these.
func KnownReason(reason string) bool {
	switch reason {
	case ReasonMethod, ReasonBodyTooLarge, ReasonMissingHeader, ReasonMalformedHeader, ReasonStaleTimestamp, ReasonBadSignature,
		ReasonUnknownSubscriber, ReasonBadRecord, ReasonMisconfigured, ReasonKVUnavailable, ReasonEdgePanic, ReasonEdgeCrashed,
		ReasonBlockedAddress:
		return true
	}
	return false
}

// Rejected returns the outcome for an edge-side rejection with the given reason.
func Rejected(reason string) Outcome { return Outcome(rejectedPrefix + reason) }

// IsRejected reports whether o is an edge-side rejection and returns its reason.
func (o Outcome) IsRejected() (reason string, ok bool) {
	return strings.CutPrefix(string(o), rejectedPrefix)
}

// ParseOutcome validates a received Edgehook-Outcome header value.
func ParseOutcome(s string) (Outcome, error) {
	switch o := Outcome(s); o {
	case OutcomeForwarded, OutcomeDuplicate, OutcomeCoalesced, OutcomeUpstreamTimeout, OutcomeUpstreamUnreachable:
		return o, nil
	}
	if reason, ok := Outcome(s).IsRejected(); ok && reason != "" && isToken(reason) {
		return Outcome(s), nil
	}
	return "", fmt.Errorf("wire: unknown edge outcome %q", s)
}

// isToken reports whether s is a non-empty run of lower-case letters, digits and underscores.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return s != ""
}
