package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/edgehook/edgehook/origin/config"
	"github.com/edgehook/edgehook/origin/engine"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
	"github.com/spf13/pflag"
)

// engineFlags are the delivery settings shared by serve and drain.
type engineFlags struct {
	cfg           engine.Config
	bodyBudget    config.ByteSize
	edgeSecret    string
	allowNetworks []string
}

// minBodyBudget and maxBodyBudget bound --body-budget: below a MiB, bodies at the default
// --body-limit would go four at a time; 64 GiB is more than --workers sends of bodies at the
// largest --body-limit (25 GiB by default), and than the memory of the hosts edgehook is for.
const minBodyBudget, maxBodyBudget = 1 << 20, 64 << 30

// maxWorkers bounds --workers: the engine sizes its queues by it (416 bytes a worker) before it
// sends anything, so a typo of a few digits ended in Go's out-of-memory crash. It is 100
// subscribers at the largest max_in_flight.
const maxWorkers = 100 * store.MaxMaxInFlight

// minPollInterval bounds how often an idle engine polls: at 1ns it kept a core busy, at 10ms
// it takes a few percent of one.
const minPollInterval = 10 * time.Millisecond

var engineSettings = []string{"workers", "batch-size", "body-budget", "poll-interval", "lease-duration", "max-attempts", "max-age",
	"backoff-base", "backoff-cap", "retry-after-cap", "circuit-threshold", "circuit-cooldown", "retention",
	"edge-url", "edge-secret", "allow-network", "shutdown-grace"}

func (f *engineFlags) register(fs *pflag.FlagSet) {
	c := &f.cfg
	fs.IntVar(&c.Workers, "workers", engine.DefaultWorkers, fmt.Sprintf("concurrent sends (1 to %d)", maxWorkers))
	fs.IntVar(&c.BatchSize, "batch-size", engine.DefaultBatchSize, "deliveries claimed per transaction at most")
	f.bodyBudget = engine.DefaultBodyBudget
	fs.Var(&f.bodyBudget, "body-budget", "event body bytes the deliveries in flight hold in memory at most; a larger body is sent alone (1MiB to 64GiB)")
	fs.DurationVar(&c.PollInterval, "poll-interval", engine.DefaultPollInterval, "how often an idle engine looks for due deliveries (writes through serve's own API wake it at once; other processes' writes and retries coming due wait for this)")
	fs.DurationVar(&c.LeaseDuration, "lease-duration", engine.DefaultLeaseDuration, "how long a claim owns its deliveries (a crashed sender's are retried after it); a send is cut at 3/4 of it, whatever the subscriber's timeout")
	fs.IntVar(&c.MaxAttempts, "max-attempts", engine.DefaultMaxAttempts, "attempts before a delivery is dead")
	fs.DurationVar(&c.MaxAge, "max-age", engine.DefaultMaxAge, "age after which a failing delivery is dead (counted from its emit, a manual retry or its subscriber's resume)")
	fs.DurationVar(&c.BackoffBase, "backoff-base", engine.DefaultBackoffBase, "retry backoff: random(0, min(cap, base*2^attempt))")
	fs.DurationVar(&c.BackoffCap, "backoff-cap", engine.DefaultBackoffCap, "longest retry backoff")
	fs.DurationVar(&c.RetryAfterCap, "retry-after-cap", engine.DefaultRetryAfterCap, "longest Retry-After of a subscriber honoured")
	fs.IntVar(&c.CircuitThreshold, "circuit-threshold", engine.DefaultCircuitThreshold, "consecutive failures that open a subscriber's circuit")
	fs.DurationVar(&c.CircuitCooldown, "circuit-cooldown", engine.DefaultCircuitCooldown, "first open-circuit pause; doubles on each re-opening")
	fs.DurationVar(&c.Retention, "retention", engine.DefaultRetention, "delivered, dead and superseded deliveries older than this are deleted: by serve as it runs, by drain as it starts and ends, and by dev (which has no --retention) past the default")
	fs.StringVar(&c.EdgeURL, "edge-url", "", "URL of the edge relay, for subscribers in edge mode")
	fs.StringVar(&f.edgeSecret, "edge-secret", "", "hop secret(s) shared with the edge, whsec_..., comma-separated during a rotation (prefer EDGEHOOK_EDGE_SECRET)")
	fs.StringSliceVar(&f.allowNetworks, "allow-network", nil, allowNetworkUsage)
	fs.DurationVar(&c.StopGrace, "shutdown-grace", engine.DefaultStopGrace, "how long requests and sends in flight may finish when stopping")
	config.Mark(fs, engineSettings...)
	config.MarkSecret(fs, "edge-secret")
}

// config checks the flags and returns the engine configuration, naming the flag at fault.
func (f *engineFlags) config() (engine.Config, error) {
	c := f.cfg
	positiveInts := []struct {
		name string
		v    int
	}{{"workers", c.Workers}, {"batch-size", c.BatchSize}, {"max-attempts", c.MaxAttempts}, {"circuit-threshold", c.CircuitThreshold}}
	for _, p := range positiveInts {
		if p.v < 1 {
			return c, usagef("--%s: must be at least 1, not %d", p.name, p.v)
		}
	}
	positiveDurations := []struct {
		name string
		v    time.Duration
	}{{"poll-interval", c.PollInterval}, {"lease-duration", c.LeaseDuration}, {"max-age", c.MaxAge}, {"backoff-base", c.BackoffBase},
		{"backoff-cap", c.BackoffCap}, {"retry-after-cap", c.RetryAfterCap}, {"circuit-cooldown", c.CircuitCooldown},
		{"retention", c.Retention}, {"shutdown-grace", c.StopGrace}}
	for _, p := range positiveDurations {
		if p.v <= 0 {
			return c, usagef("--%s: must be positive, not %s", p.name, p.v)
		}
	}
	switch {
	case c.Workers > maxWorkers:
		return c, usagef("--workers: %d is above %d", c.Workers, maxWorkers)
	case f.bodyBudget < minBodyBudget || f.bodyBudget > maxBodyBudget:
		return c, usagef("--body-budget: %s is outside %s to %s", f.bodyBudget, config.ByteSize(minBodyBudget), config.ByteSize(maxBodyBudget))
	case c.PollInterval < minPollInterval:
		return c, usagef("--poll-interval: %s is below %s (an idle engine would spin on the database)", c.PollInterval, minPollInterval)
	case c.LeaseDuration < time.Second:
		return c, usagef("--lease-duration: %s is below 1s", c.LeaseDuration)
	case c.BackoffCap < c.BackoffBase:
		return c, usagef("--backoff-cap: %s is below --backoff-base %s", c.BackoffCap, c.BackoffBase)
	case c.BackoffCap > engine.MaxBackoffCap:
		return c, usagef("--backoff-cap: %s is above %s", c.BackoffCap, engine.MaxBackoffCap)
	case c.RetryAfterCap > wire.MaxRetryAfter:
		return c, usagef("--retry-after-cap: %s is above %s", c.RetryAfterCap, wire.MaxRetryAfter)
	}
	if c.EdgeURL != "" {
		if err := wire.ValidateURL(c.EdgeURL); err != nil {
			return c, usagef("--edge-url: %v", err)
		}
	}
	c.CircuitMaxCooldown = max(engine.DefaultCircuitMaxCooldown, c.CircuitCooldown)
	c.BodyBudget = int(f.bodyBudget)
	if f.edgeSecret != "" {
		secrets, err := signature.ParseSecrets(f.edgeSecret)
		if err != nil {
			return c, usagef("--edge-secret: %v", err) // the error never quotes the secret
		}
		c.EdgeSecrets = secrets
	}
	if c.EdgeURL != "" && len(c.EdgeSecrets) == 0 {
		return c, usagef("--edge-secret: required with --edge-url")
	}
	allow, err := parseNetworks(f.allowNetworks)
	if err != nil {
		return c, err
	}
	c.AllowNetworks = allow
	c.Version = Version()
	return c, nil
}

// warnNoEdge logs the active subscribers in edge mode when no --edge-url is set: the engine
// cannot build their requests, so each attempt fails and their deliveries end dead.
func warnNoEdge(ctx context.Context, st *store.Store, cfg engine.Config, log *slog.Logger) error {
	if cfg.EdgeURL != "" {
		return nil
	}
	subs, err := st.ListSubscribers(ctx)
	if err != nil {
		return err
	}
	var ids []string
	for _, s := range subs {
		if s.Mode == store.ModeEdge && s.State == store.StateActive {
			ids = append(ids, s.ID)
		}
	}
	if len(ids) > 0 {
		log.Warn("subscribers in edge mode but no --edge-url (EDGEHOOK_EDGE_URL): their deliveries fail until it is set",
			"subscribers", ids)
	}
	return nil
}

// allowNetworkUsage is --allow-network's help, of the direct sends of drain and serve and of the
// forwards of edge local alike.
const allowNetworkUsage = "internal networks subscribers' URLs may reach, e.g. 127.0.0.0/8 for local receivers (default: none)"

// parseNetworks reads --allow-network's CIDR prefixes.
func parseNetworks(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, n := range list {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return nil, usagef("--allow-network: %q is not a CIDR prefix such as 127.0.0.0/8", n)
		}
		out = append(out, p)
	}
	return out, nil
}
