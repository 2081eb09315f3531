package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// subscriberFlags are the settings of `subscribers add` and `subscribers update`.
type subscriberFlags struct {
	id, url, profile, legacyPrefix, mode string
	events, headers, coalesceTypes       []string
	rate                                 float64
	burst, maxInFlight                   int
	timeout                              time.Duration
	coalesceKey                          string
	coalesceWindow                       time.Duration
	noCoalesce, noHeaders                bool
}

func (f *subscriberFlags) register(fs *pflag.FlagSet, creating bool) {
	// The defaults a creation takes; an update keeps what a flag left out leaves.
	def := func(format string, args ...any) string {
		if !creating {
			return ""
		}
		return fmt.Sprintf(format, args...)
	}
	if creating {
		fs.StringVar(&f.id, "id", "", "subscriber id (default: generated)")
	}
	urlUsage := "endpoint URL (http or https)"
	if !creating {
		urlUsage = "new endpoint URL (http or https); a different one also resets the Retry-After pause and the circuit breaker " +
			"and makes the pending retries due at once (a running serve sends them at its next poll)"
	}
	fs.StringVar(&f.url, "url", "", urlUsage)
	fs.StringSliceVar(&f.events, "events", nil, `event patterns: "*", an exact type or "prefix.*" (comma-separated or repeated)`)
	fs.StringVar(&f.profile, "profile", "", "signature profile: standard"+def(" (default)")+" or legacy")
	fs.StringVar(&f.legacyPrefix, "legacy-prefix", "", "legacy profile header prefix, e.g. VVV for X-VVV-Signature")
	fs.StringVar(&f.mode, "mode", "", "route: direct"+def(" (default)")+" or edge")
	fs.Float64Var(&f.rate, "rate", 0, "deliveries per second"+def(" (default %g)", store.DefaultRatePerSec))
	fs.IntVar(&f.burst, "burst", 0, "token bucket size"+def(" (default %d)", store.DefaultBurst))
	fs.IntVar(&f.maxInFlight, "max-in-flight", 0, "concurrent deliveries at most"+def(" (default %d)", store.DefaultMaxInFlight))
	fs.DurationVar(&f.timeout, "timeout", 0, "per-request timeout"+def(" (default %s)", wire.DefaultTimeout))
	headerUsage := `extra request header "Name: value" (repeatable)`
	if !creating {
		headerUsage = `extra request headers "Name: value" (repeatable); they replace all the subscriber's extra headers`
	}
	fs.StringArrayVar(&f.headers, "header", nil, headerUsage)
	fs.StringSliceVar(&f.coalesceTypes, "coalesce-types", nil, "event patterns whose deliveries coalesce (latest wins)")
	fs.StringVar(&f.coalesceKey, "coalesce-key", "", "payload field whose value is the coalesce key, e.g. video_id")
	fs.DurationVar(&f.coalesceWindow, "coalesce-window", 0, "at most one forward per key per window at the edge, e.g. 30s")
	if !creating {
		fs.BoolVar(&f.noCoalesce, "no-coalesce", false, "remove coalescing")
		fs.BoolVar(&f.noHeaders, "no-headers", false, "remove the extra request headers")
	}
}

func (f *subscriberFlags) parsedHeaders() (map[string]string, error) {
	if len(f.headers) == 0 {
		return nil, nil
	}
	h := make(map[string]string, len(f.headers))
	seen := make(map[string]bool, len(f.headers))
	for _, kv := range f.headers {
		name, value, ok := strings.Cut(kv, ":")
		if !ok {
			return nil, usagef("--header: %q is not \"Name: value\"", kv)
		}
		name = strings.TrimSpace(name)
		lower := strings.ToLower(name)
		if seen[lower] {
			return nil, usagef("--header: %q is given twice (names are case-insensitive)", name)
		}
		seen[lower] = true
		h[name] = strings.TrimSpace(value)
	}
	return h, nil
}

// checkGiven refuses a 0 given to --rate, --burst or --max-in-flight, or an empty --id, --profile
// or --mode, which the store would take as "the default" (resetting a subscriber's setting on
// update: `--mode "$MODE"` with MODE unset would move an edge subscriber to direct; and a re-run
// `add --id "$ID"` would add another subscriber, not fail on the first), and a --timeout outside
// the range the subscriber record allows (below 1ms it would also read as 0).
func (f *subscriberFlags) checkGiven(fs *pflag.FlagSet) error {
	for _, z := range []struct {
		name, zero string
		isZero     bool
	}{{"rate", "0", f.rate == 0}, {"burst", "0", f.burst == 0}, {"max-in-flight", "0", f.maxInFlight == 0},
		{"id", "empty", f.id == ""}, {"profile", "empty", f.profile == ""}, {"mode", "empty", f.mode == ""}} {
		if fs.Changed(z.name) && z.isZero {
			return usagef("--%s: must not be %s (leave the flag out instead)", z.name, z.zero)
		}
	}
	if fs.Changed("timeout") && (f.timeout < wire.MinTimeout || f.timeout > wire.MaxTimeout) {
		return usagef("--timeout: %s is outside [%s, %s]", f.timeout, wire.MinTimeout, wire.MaxTimeout)
	}
	return nil
}

func (f *subscriberFlags) coalesceRule(fs *pflag.FlagSet) (*wire.CoalesceRule, error) {
	if !fs.Changed("coalesce-types") && !fs.Changed("coalesce-key") && !fs.Changed("coalesce-window") {
		return nil, nil
	}
	if len(f.coalesceTypes) == 0 || f.coalesceKey == "" || !fs.Changed("coalesce-window") {
		return nil, usagef("--coalesce-types, --coalesce-key and --coalesce-window go together")
	}
	if f.coalesceWindow <= 0 {
		return nil, usagef("--coalesce-window: %s must be positive", f.coalesceWindow)
	}
	if f.coalesceWindow%time.Second != 0 {
		return nil, usagef("--coalesce-window: %s is not a whole number of seconds", f.coalesceWindow)
	}
	if f.coalesceWindow > wire.MaxCoalesceWindow { // the store would say it in bare seconds
		return nil, usagef("--coalesce-window: %s is above %s", f.coalesceWindow, wire.MaxCoalesceWindow)
	}
	return &wire.CoalesceRule{EventTypes: f.coalesceTypes, Key: f.coalesceKey, WindowSeconds: int64(f.coalesceWindow / time.Second)}, nil
}

func (f *subscriberFlags) input(fs *pflag.FlagSet) (store.SubscriberInput, error) {
	if err := f.checkGiven(fs); err != nil {
		return store.SubscriberInput{}, err
	}
	headers, err := f.parsedHeaders()
	if err != nil {
		return store.SubscriberInput{}, err
	}
	rule, err := f.coalesceRule(fs)
	if err != nil {
		return store.SubscriberInput{}, err
	}
	return store.SubscriberInput{ID: f.id, URL: f.url, Events: f.events, Profile: store.Profile(f.profile), LegacyPrefix: f.legacyPrefix,
		Mode: store.Mode(f.mode), RatePerSec: f.rate, Burst: f.burst, MaxInFlight: f.maxInFlight, TimeoutMS: f.timeout.Milliseconds(),
		Headers: headers, Coalesce: rule}, nil
}

// patch carries only the flags given on the command line.
func (f *subscriberFlags) patch(fs *pflag.FlagSet) (store.SubscriberPatch, error) {
	var p store.SubscriberPatch
	if err := f.checkGiven(fs); err != nil {
		return p, err
	}
	set := fs.Changed
	if set("url") {
		p.URL = &f.url
	}
	if set("events") {
		p.Events = &f.events
	}
	if set("profile") {
		pr := store.Profile(f.profile)
		p.Profile = &pr
	}
	if set("legacy-prefix") {
		p.LegacyPrefix = &f.legacyPrefix
	}
	if set("mode") {
		m := store.Mode(f.mode)
		p.Mode = &m
	}
	if set("rate") {
		p.RatePerSec = &f.rate
	}
	if set("burst") {
		p.Burst = &f.burst
	}
	if set("max-in-flight") {
		p.MaxInFlight = &f.maxInFlight
	}
	if set("timeout") {
		ms := f.timeout.Milliseconds()
		p.TimeoutMS = &ms
	}
	switch {
	case f.noHeaders && set("header"):
		return p, usagef("--no-headers conflicts with --header")
	case f.noHeaders:
		none := map[string]string{}
		p.Headers = &none
	case set("header"):
		h, err := f.parsedHeaders()
		if err != nil {
			return p, err
		}
		p.Headers = &h
	}
	if f.noCoalesce && (set("coalesce-types") || set("coalesce-key") || set("coalesce-window")) {
		return p, usagef("--no-coalesce conflicts with --coalesce-types, --coalesce-key and --coalesce-window")
	}
	rule, err := f.coalesceRule(fs)
	switch {
	case err != nil:
		return p, err
	case rule != nil:
		p.Coalesce = &rule
	case f.noCoalesce:
		var none *wire.CoalesceRule
		p.Coalesce = &none
	}
	return p, nil
}

func init() {
	group := &cobra.Command{Use: "subscribers", Aliases: []string{"subscriber", "subs"}, Short: "Manage subscribers (directly on the database file)", Args: cobra.ArbitraryArgs, RunE: runGroup}

	var add subscriberFlags
	addCmd := &cobra.Command{
		Use:   "add --url URL --events PATTERNS",
		Short: "Create a subscriber; prints it with its signing secret, which is shown only this once",
		Example: `  edgehook subscribers add --url https://example.com/hooks --events 'video.*'
  edgehook subscribers add --id legacy --url https://old.example.com/in --events '*' --profile legacy --legacy-prefix VVV`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, err := add.input(cmd.Flags())
			if err != nil {
				return err
			}
			return withStore(cmd, func(ctx context.Context, st *store.Store) error {
				sub, err := st.CreateSubscriber(ctx, in)
				if err != nil {
					return flagError(err)
				}
				return printWithSecret(cmd.OutOrStdout(), sub, "created", "--overlap 0s ")
			})
		},
	}
	add.register(addCmd.Flags(), true)

	var listJSON bool
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List subscribers",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, st *store.Store) error {
				subs, err := st.ListSubscribers(ctx)
				if err != nil {
					return err
				}
				list := api.NewSubscriberList(subs)
				if listJSON {
					return printJSON(cmd.OutOrStdout(), list)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATE\tMODE\tEVENTS\tURL")
				for _, s := range list.Subscribers {
					printRow(tw, s.ID, s.State, s.Mode, strings.Join(s.Events, ","), s.URL)
				}
				return tw.Flush()
			})
		},
	}
	listCmd.Flags().BoolVar(&listJSON, "json", false, "print the JSON of GET /v1/subscribers instead of a table")

	showCmd := idCommand("show ID", "Show one subscriber (never its secrets)", func(ctx context.Context, st *store.Store, id string) (any, error) {
		sub, err := st.GetSubscriber(ctx, id)
		if err != nil {
			return nil, err
		}
		return api.NewSubscriber(sub), nil
	})

	var upd subscriberFlags
	updateCmd := &cobra.Command{
		Use:     "update ID [flags]",
		Short:   "Change some settings of a subscriber; flags not given are kept",
		Example: `  edgehook subscribers update sub_123 --rate 50 --burst 100`,
		Args:    exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := upd.patch(cmd.Flags())
			if err != nil {
				return err
			}
			return withStore(cmd, func(ctx context.Context, st *store.Store) error {
				sub, err := st.UpdateSubscriber(ctx, args[0], p)
				if err != nil {
					return flagError(err)
				}
				return printJSON(cmd.OutOrStdout(), api.NewSubscriber(sub))
			})
		},
	}
	upd.register(updateCmd.Flags(), false)

	var pauseReason string
	pauseCmd := idCommand("pause ID", "Stop sending to a subscriber; its deliveries keep queueing", func(ctx context.Context, st *store.Store, id string) (any, error) {
		reason, err := api.PauseReason(pauseReason)
		if err != nil {
			return nil, usagef("--reason: %v", err)
		}
		sub, err := st.PauseSubscriber(ctx, id, reason)
		if err != nil {
			return nil, err
		}
		return api.NewSubscriber(sub), nil
	})
	pauseCmd.Flags().StringVar(&pauseReason, "reason", "", "why, shown as the subscriber's state_reason (default \""+api.DefaultPauseReason+"\")")
	resumeCmd := idCommand("resume ID", "Send to a paused or disabled subscriber again; what waited for it gets its --max-age from now", func(ctx context.Context, st *store.Store, id string) (any, error) {
		sub, err := st.ResumeSubscriber(ctx, id)
		if err != nil {
			return nil, err
		}
		return api.NewSubscriber(sub), nil
	})

	var overlap time.Duration
	rotateCmd := &cobra.Command{
		Use:   "rotate-secret ID",
		Short: "Make a new signing secret (printed this once); the old one stays valid for --overlap",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, func(ctx context.Context, st *store.Store) error {
				sub, err := st.RotateSecret(ctx, args[0], overlap)
				if err != nil {
					return flagError(err)
				}
				return printWithSecret(cmd.OutOrStdout(), sub, "given a new secret", "")
			})
		},
	}
	rotateCmd.Long = `Rotate-secret makes a new signing secret, printed this once; the old one stays valid for --overlap.
Standard-profile deliveries carry a signature by each valid secret. A legacy-profile subscriber
carries one, made with the old secret until the overlap ends: its receiver switches then (or at
once with --overlap 0s, what it refuses meanwhile being retried).`
	rotateCmd.Flags().DurationVar(&overlap, "overlap", api.DefaultOverlap, "how long the old secret stays valid (0s: ends at once)")

	removeCmd := idCommand("remove ID", "Delete a subscriber and its queue", func(ctx context.Context, st *store.Store, id string) (any, error) {
		if err := st.DeleteSubscriber(ctx, id); err != nil {
			return nil, err
		}
		return map[string]string{"removed": id}, nil
	})
	removeCmd.Aliases = []string{"rm", "delete"}

	group.AddCommand(addCmd, listCmd, showCmd, updateCmd, pauseCmd, resumeCmd, rotateCmd, removeCmd)
	rootCmd.AddCommand(group)
}

// printWithSecret prints a subscriber with its new secret, which is shown this once. If the output
// fails (a full disk under "> sub.json"), the change is committed and the secret lost: the error
// says so, and how to make another (rotateFlags are those of that command).
func printWithSecret(w io.Writer, sub *store.Subscriber, done, rotateFlags string) error {
	if err := printJSON(w, api.NewSubscriberWithSecret(sub)); err != nil {
		return fmt.Errorf("subscriber %s was %s, but its secret could not be printed (%w): make another with `edgehook subscribers rotate-secret %s%s`",
			sub.ID, done, err, rotateFlags, sub.ID)
	}
	return nil
}
