package main

import (
	"context"
	"fmt"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/spf13/cobra"
)

func init() {
	var newStoreID bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create the database file or bring its schema up to date (every command also does this)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, st *store.Store) error {
				if err := st.Migrate(ctx); err != nil {
					return err
				}
				if _, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: schema up to date\n", global.db); err != nil || !newStoreID {
					return err
				}
				id, err := st.RenewStoreID(ctx)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: new store id %s (delivery ids dlv_%s_…)\n", global.db, id, id)
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&newStoreID, "new-store-id", false,
		"after restoring a backup: give the database a new store id, so that no delivery id is handed out twice (stop every other process on the file first)")
	rootCmd.AddCommand(cmd)
}
