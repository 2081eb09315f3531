package main

import (
	"context"
	"os"
	"time"

	"github.com/edgehook/edgehook/origin/engine"
	"github.com/spf13/cobra"
)

// DefaultDrainFor suits a drain started by cron every minute. Sends still in flight then get up to
// --shutdown-grace, so a run may outlast its minute: the next one runs beside it, which is safe.
const DefaultDrainFor = 55 * time.Second

func init() {
	var ef engineFlags
	var drainFor time.Duration
	var untilIdle bool
	cmd := &cobra.Command{
		Use:   "drain [--for 55s] [--until-idle]",
		Short: "Send due deliveries for a bounded time, then exit (for cron on hosts without a process manager)",
		Long: `Drain runs the delivery engine in the foreground: it claims and sends due deliveries until --for
has passed (or, with --until-idle, until nothing is due), lets sends in flight finish for up to
--shutdown-grace, deletes finished deliveries older than --retention (until --for and the grace
are up; the next run deletes the rest), and exits. It logs one summary line.

Overlapping runs are safe: a delivery is leased to one process at a time, and rate limits are kept
in the database, so a drain may run beside serve or another drain on the same file.`,
		Example: `  * * * * * cd /home/me/edgehook && ./edgehook drain --for 55s --log-level warn`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if drainFor <= 0 {
				return usagef("--for: must be positive, not %s", drainFor)
			}
			cfg, err := ef.config()
			if err != nil {
				return err
			}
			log, err := newLogger(os.Stderr)
			if err != nil {
				return err
			}
			st, err := openWritableStore(cmd.Context())
			if err != nil {
				return startupErr(cmd.Context(), err)
			}
			defer st.Close()
			if err := warnNoEdge(cmd.Context(), st, cfg, log); err != nil {
				return startupErr(cmd.Context(), err)
			}
			eng, err := engine.New(st, cfg, log, nil)
			if err != nil {
				return err
			}
			// The run ends within --for and the grace: cron starts the next one a minute on.
			end := time.Now().Add(drainFor + cfg.StopGrace)
			res, err := eng.Drain(cmd.Context(), engine.DrainOptions{For: drainFor, UntilIdle: untilIdle})
			if err != nil {
				return err
			}
			// Where cron is the only runner, nobody else applies the retention window. A drain
			// stopped by a signal, or out of time, leaves it (or the rest) to the next run.
			var pruned int64
			if cmd.Context().Err() == nil {
				ctx, cancel := context.WithDeadline(cmd.Context(), end)
				pruned, err = st.Prune(ctx, st.Now().Add(-cfg.Retention))
				if ctx.Err() != nil {
					err = nil
				}
				cancel()
			}
			log.Info("drain finished", "claimed", res.Claimed, "delivered", res.Delivered, "retried", res.Retried,
				"dead", res.Dead, "held", res.Held, "superseded", res.Superseded, "released", res.Released, "stale", res.Stale, "idle", res.Idle, "pruned", res.Pruned+pruned)
			return err
		},
	}
	cmd.Flags().DurationVar(&drainFor, "for", DefaultDrainFor, "stop claiming after this long")
	cmd.Flags().BoolVar(&untilIdle, "until-idle", false, "also stop as soon as nothing is due or in flight")
	ef.register(cmd.Flags())
	rootCmd.AddCommand(cmd)
}
