package main

import (
	"context"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/spf13/cobra"
)

func init() {
	group := &cobra.Command{Use: "dead", Short: "Dead letters: deliveries that gave up (directly on the database file)", Args: cobra.ArbitraryArgs, RunE: runGroup}

	lf := listFlags{status: string(store.StatusDead)}
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List dead deliveries with their last status and error",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return listDeliveries(cmd, &lf) },
	}
	lf.register(listCmd.Flags(), false)

	var subscriber, from, to string
	replayCmd := &cobra.Command{
		Use:     "replay --subscriber ID [--from TIME] [--to TIME]",
		Short:   "Queue a subscriber's dead deliveries again (those that died in [--from, --to))",
		Example: `  edgehook dead replay --subscriber sub_123 --from 2026-01-02T00:00:00Z`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if subscriber == "" {
				return usagef("--subscriber: required")
			}
			f, t, err := parseFlagRange(from, to)
			if err != nil {
				return err
			}
			return withStore(cmd, func(ctx context.Context, st *store.Store) error {
				r, err := st.ReplayDead(ctx, subscriber, f, t, st.Now())
				if err != nil {
					return flagError(err)
				}
				return printJSON(cmd.OutOrStdout(), api.NewReplayResult(r))
			})
		},
	}
	replayCmd.Flags().StringVar(&subscriber, "subscriber", "", "subscriber id (required)")
	replayCmd.Flags().StringVar(&from, "from", "", "died at or after this RFC 3339 time (default: the beginning)")
	replayCmd.Flags().StringVar(&to, "to", "", "died before this RFC 3339 time (default: no bound)")

	group.AddCommand(listCmd, replayCmd)
	rootCmd.AddCommand(group)
}
