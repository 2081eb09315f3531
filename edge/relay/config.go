package relay

import (
	"fmt"
	"strconv"
	"time"

	"github.com/edgehook/edgehook/shared/signature"
)

// Names of the settings every runtime reads (Worker vars and secret, harness environment).
const (
	EnvSecret    = "EDGE_SECRET"       // one or more whsec_ secrets, comma or space separated
	EnvTolerance = "TOLERANCE_SECONDS" // hop timestamp tolerance
	EnvDedupTTL  = "DEDUP_TTL_SECONDS" // how long a delivered id is remembered
	EnvMaxBody   = "MAX_BODY_BYTES"    // largest request body accepted
)

// Defaults used when a setting is empty.
const (
	DefaultTolerance = signature.DefaultTolerance
	DefaultDedupTTL  = 24 * time.Hour
	DefaultMaxBody   = 1 << 20
	// MaxMaxBody bounds MaxBody: Cloudflare refuses larger request bodies on most plans anyway.
	MaxMaxBody = 100 << 20
)

// maxSetting bounds every numeric setting, so seconds never overflow a time.Duration.
const maxSetting = 1e9

// Config is the relay's configuration.
type Config struct {
	// Secrets are the edge secrets; a hop signature by any of them is accepted (two during a
	// rotation).
	Secrets []signature.Secret
	// Tolerance is how far the hop timestamp may be from the edge's clock, either way.
	Tolerance time.Duration
	// DedupTTL is how long a delivery id acknowledged with a 2xx is remembered; at least MinKVTTL
	// and at least Tolerance.
	DedupTTL time.Duration
	// MaxBody is the largest request body accepted, in bytes.
	MaxBody int64
}

// Validate reports the first wrong field by its setting name.
func (c *Config) Validate() error {
	switch {
	case len(c.Secrets) == 0:
		return fmt.Errorf("%s: at least one edge secret is required", EnvSecret)
	case c.Tolerance < time.Second:
		return fmt.Errorf("%s: %s is below 1s", EnvTolerance, c.Tolerance)
	case c.DedupTTL < MinKVTTL:
		return fmt.Errorf("%s: %s is below KV's minimum TTL of %s", EnvDedupTTL, c.DedupTTL, MinKVTTL)
	case c.DedupTTL < c.Tolerance:
		// A hop stamped on time is accepted for Tolerance; once its dedup mark expired, a replay
		// of an acknowledged delivery would be forwarded again (one stamped ahead: dedupTTL).
		return fmt.Errorf("%s: %s is below %s (%s): a replayed delivery would be forwarded again after its mark expired",
			EnvDedupTTL, c.DedupTTL, EnvTolerance, c.Tolerance)
	case c.MaxBody < 1 || c.MaxBody > MaxMaxBody:
		return fmt.Errorf("%s: %d is outside [1, %d]", EnvMaxBody, c.MaxBody, MaxMaxBody)
	}
	for i, s := range c.Secrets {
		if s.IsZero() {
			return fmt.Errorf("%s: secret %d is empty", EnvSecret, i+1)
		}
	}
	return nil
}

// ParseConfig builds a Config from named settings (EnvSecret, EnvTolerance, EnvDedupTTL,
// EnvMaxBody) read through getenv; empty settings take their defaults. Errors name the setting.
func ParseConfig(getenv func(name string) string) (Config, error) {
	secrets, err := signature.ParseSecrets(getenv(EnvSecret))
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", EnvSecret, err)
	}
	c := Config{Secrets: secrets, Tolerance: DefaultTolerance, DedupTTL: DefaultDedupTTL, MaxBody: DefaultMaxBody}
	for _, f := range []struct {
		name string
		set  func(n int64)
	}{
		{EnvTolerance, func(n int64) { c.Tolerance = time.Duration(n) * time.Second }},
		{EnvDedupTTL, func(n int64) { c.DedupTTL = time.Duration(n) * time.Second }},
		{EnvMaxBody, func(n int64) { c.MaxBody = n }},
	} {
		v := getenv(f.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > maxSetting {
			return Config{}, fmt.Errorf("%s: %q is not an integer in [0, %d]", f.name, v, int64(maxSetting))
		}
		f.set(n)
	}
	return c, c.Validate()
}
