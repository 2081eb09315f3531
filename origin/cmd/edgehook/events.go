package main

import (
	"context"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/spf13/cobra"
)

func init() {
	group := &cobra.Command{Use: "events", Aliases: []string{"event"}, Short: "Inspect emitted events (directly on the database file)", Args: cobra.ArbitraryArgs, RunE: runGroup}

	var dataOnly bool
	showCmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one event with its data, as GET /v1/events/{id} does (until the retention prune deletes it)",
		Example: `  edgehook events show evt_1
  edgehook events show --data evt_1 > body.json`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, func(ctx context.Context, st *store.Store) error {
				ev, err := st.GetEvent(ctx, args[0])
				if err != nil {
					return err
				}
				if dataOnly { // the stored bytes themselves: the JSON view re-indents them
					_, err = cmd.OutOrStdout().Write(ev.Body)
					return err
				}
				return printJSON(cmd.OutOrStdout(), api.NewEvent(ev))
			})
		},
	}
	showCmd.Flags().BoolVar(&dataOnly, "data", false, "print only the data, byte for byte as every subscriber is sent it")
	group.AddCommand(showCmd)
	rootCmd.AddCommand(group)
}
