package engine

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// Defaults of Config. The retry policy follows what webhook senders in the field do (Svix retries
// for over a day, Stripe for three): a dozen attempts spread over hours, given up after a day, so a
// subscriber down for an afternoon loses nothing. The 11 waits have ceilings of 1m, 2m … 256m, then
// 6h and 6h, 20.5h in all: full jitter makes it 10h on average before the last attempt, and never
// past the max age.
const (
	DefaultWorkers            = 256 // sends are goroutines waiting on the network: cheap; 16 subscribers at the default in-flight cap
	DefaultBatchSize          = 128
	DefaultLeaseDuration      = 90 * time.Second // above wire.MaxTimeout, so a slow send keeps its lease
	DefaultPollInterval       = 500 * time.Millisecond
	DefaultBackoffBase        = time.Minute
	DefaultBackoffCap         = 6 * time.Hour
	MaxBackoffCap             = wire.MaxRetryAfter // the longest wait between attempts, as for a Retry-After
	DefaultMaxAttempts        = 12
	DefaultMaxAge             = 24 * time.Hour
	DefaultRetryAfterCap      = time.Hour
	DefaultExcerptBytes       = wire.MaxExcerptBytes
	DefaultCircuitThreshold   = 5
	DefaultCircuitCooldown    = 30 * time.Second
	DefaultCircuitMaxCooldown = 30 * time.Minute
	DefaultRetention          = 7 * 24 * time.Hour
	DefaultPruneInterval      = 10 * time.Minute
	DefaultStopGrace          = 10 * time.Second
	DefaultSettleBatch        = 256
	DefaultVersion            = "dev"
	// DefaultBodyBudget binds only past a 1 MiB --body-limit: at the default 256 KiB, the 256
	// workers hold 64 MiB at most. Bodies of 100 MiB go two at a time, within a small VPS's reach.
	DefaultBodyBudget = 256 << 20
)

// Config tunes an Engine. Zero fields take the defaults above. Storage settings (synchronous mode,
// backlog caps, busy timeout) belong to store.Options.
type Config struct {
	Workers       int           // concurrent sends
	BatchSize     int           // deliveries per claim at most
	LeaseDuration time.Duration // how long a claim owns its deliveries; sends are cut at 3/4 of it
	// PollInterval is how often an idle engine looks for due work it was not woken for: emits
	// and Wake calls in its own process wake it at once; writes by other processes (CLI
	// commands, other daemons, drains) and work that comes due with time (a backoff, a
	// Retry-After pause or a circuit cool-down ending, an expired lease) wait for the poll.
	PollInterval time.Duration

	BackoffBase   time.Duration // full-jitter backoff: random(0, min(BackoffCap, BackoffBase·2^attempt))
	BackoffCap    time.Duration
	MaxAttempts   int           // attempts before a delivery is dead
	MaxAge        time.Duration // age (from emit, manual retry or its subscriber's resume) after which a failing delivery is dead
	RetryAfterCap time.Duration // longest Retry-After honoured
	ExcerptBytes  int           // response body bytes kept in the attempt log

	// EdgeURL and EdgeSecrets are required when any subscriber uses edge mode: the URL of the edge
	// Worker (or the local harness) and the secrets the hop signature is made with (several during
	// a rotation; the edge accepts any).
	EdgeURL     string
	EdgeSecrets []signature.Secret
	// AllowNetworks lists destinations that direct mode may reach although they are loopback,
	// private, link-local or otherwise internal (for tests and local runs). Empty: none.
	AllowNetworks []netip.Prefix

	CircuitThreshold   int           // consecutive failures that open a subscriber's circuit
	CircuitCooldown    time.Duration // first open period; doubles on each re-opening
	CircuitMaxCooldown time.Duration

	Retention     time.Duration // delivered, dead and superseded deliveries older than this are pruned
	PruneInterval time.Duration // how often the daemon prunes
	StopGrace     time.Duration // how long Stop lets sends in flight finish when its ctx has no deadline
	SettleBatch   int           // outcomes written per transaction at most
	// BodyBudget bounds the event body bytes of the deliveries claimed and not yet sent: claims
	// stop short of it, but for a single body larger than it, sent alone.
	BodyBudget int

	Version string // in the User-Agent: "edgehook/<Version>"
	// Now is the clock; nil means time.Now. Tests inject a settable one so lease, backoff and rate
	// tests run without sleeping.
	Now func() time.Time
}

// withDefaults returns c with zero fields defaulted, or an error naming the first bad field.
func (c Config) withDefaults() (Config, error) {
	type intField struct {
		name string
		v    *int
		def  int
	}
	for _, f := range []intField{
		{"workers", &c.Workers, DefaultWorkers}, {"batch_size", &c.BatchSize, DefaultBatchSize},
		{"max_attempts", &c.MaxAttempts, DefaultMaxAttempts}, {"excerpt_bytes", &c.ExcerptBytes, DefaultExcerptBytes},
		{"circuit_threshold", &c.CircuitThreshold, DefaultCircuitThreshold}, {"settle_batch", &c.SettleBatch, DefaultSettleBatch},
		{"body_budget", &c.BodyBudget, DefaultBodyBudget},
	} {
		if *f.v < 0 {
			return c, fmt.Errorf("engine config: %s: %d must not be negative", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	type durField struct {
		name string
		v    *time.Duration
		def  time.Duration
	}
	for _, f := range []durField{
		{"lease_duration", &c.LeaseDuration, DefaultLeaseDuration}, {"poll_interval", &c.PollInterval, DefaultPollInterval},
		{"backoff_base", &c.BackoffBase, DefaultBackoffBase}, {"backoff_cap", &c.BackoffCap, DefaultBackoffCap},
		{"max_age", &c.MaxAge, DefaultMaxAge}, {"retry_after_cap", &c.RetryAfterCap, DefaultRetryAfterCap},
		{"circuit_cooldown", &c.CircuitCooldown, DefaultCircuitCooldown}, {"circuit_max_cooldown", &c.CircuitMaxCooldown, DefaultCircuitMaxCooldown},
		{"retention", &c.Retention, DefaultRetention}, {"prune_interval", &c.PruneInterval, DefaultPruneInterval},
		{"stop_grace", &c.StopGrace, DefaultStopGrace},
	} {
		if *f.v < 0 {
			return c, fmt.Errorf("engine config: %s: %s must not be negative", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	switch {
	case c.LeaseDuration < time.Second:
		return c, fmt.Errorf("engine config: lease_duration: %s is below 1s", c.LeaseDuration)
	case c.BackoffCap < c.BackoffBase:
		return c, fmt.Errorf("engine config: backoff_cap: %s is below backoff_base %s", c.BackoffCap, c.BackoffBase)
	case c.BackoffCap > MaxBackoffCap:
		return c, fmt.Errorf("engine config: backoff_cap: %s is above %s", c.BackoffCap, MaxBackoffCap)
	case c.CircuitMaxCooldown < c.CircuitCooldown:
		return c, fmt.Errorf("engine config: circuit_max_cooldown: %s is below circuit_cooldown %s", c.CircuitMaxCooldown, c.CircuitCooldown)
	case c.RetryAfterCap > wire.MaxRetryAfter:
		return c, fmt.Errorf("engine config: retry_after_cap: %s is above %s", c.RetryAfterCap, wire.MaxRetryAfter)
	}
	if c.EdgeURL != "" {
		if err := wire.ValidateURL(c.EdgeURL); err != nil {
			return c, fmt.Errorf("engine config: edge_url: %w", err)
		}
		if len(c.EdgeSecrets) == 0 {
			return c, fmt.Errorf("engine config: edge_secrets: at least one is required with edge_url")
		}
	}
	if c.Version == "" {
		c.Version = DefaultVersion
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// BackoffCeiling is the longest wait before the retry of a delivery that failed its attempt
// after `attempts` earlier ones (store.Claimed.Attempts: 0 for the first attempt's failure):
// min(cap, base·2^attempts), compared before shifting, as a shift that overflows can wrap to a
// small positive duration (base 2^26+1 ns after 38 attempts read 4.6 minutes).
func (c *Config) BackoffCeiling(attempts int) time.Duration {
	if attempts < 63 && c.BackoffBase <= c.BackoffCap>>attempts {
		return c.BackoffBase << attempts
	}
	return c.BackoffCap
}

// UserAgent is the User-Agent of every request the engine sends.
func (c *Config) UserAgent() string { return "edgehook/" + c.Version }
