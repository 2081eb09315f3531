package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/spf13/cobra"
)

func init() {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show the queue: its depth, and each subscriber's deliveries by status (what GET /v1/stats answers)",
		Long: `Stats reads the queue from the database file, so it works where no serve runs (cron and drain on
shared hosting): the pending and in-flight deliveries of all subscribers, then per subscriber its
state, its retained deliveries by status, how long its oldest due delivery has waited, and how many
were delivered in the last minute.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, st *store.Store) error {
				s, err := st.Stats(ctx, st.Now())
				if err != nil {
					return err
				}
				v := api.NewStats(&s)
				if asJSON {
					return printJSON(cmd.OutOrStdout(), v)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "depth: %d (pending and in flight)\n", v.Depth)
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SUBSCRIBER\tSTATE\tPENDING\tLEASED\tHELD\tDEAD\tDELIVERED\tSUPERSEDED\tOLDEST DUE\tLAST MINUTE\tCIRCUIT")
				for _, sub := range v.Subscribers {
					circuit := "closed"
					if sub.CircuitOpen {
						circuit = "open"
					}
					c := sub.Counts
					printRow(tw, sub.SubscriberID, sub.State,
						c[store.StatusPending], c[store.StatusLeased], c[store.StatusHeld], c[store.StatusDead], c[store.StatusDelivered], c[store.StatusSuperseded],
						time.Duration(sub.OldestDueAgeSeconds*float64(time.Second)).Round(time.Second), sub.DeliveredLastMinute, circuit)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the JSON of GET /v1/stats instead of a table")
	rootCmd.AddCommand(cmd)
}
