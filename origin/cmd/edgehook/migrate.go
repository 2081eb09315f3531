package main

import (
	"context"
	"fmt"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/spf13/cobra"
)

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "migrate",
		Short: "Create the database file or bring its schema up to date (every command also does this)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, st *store.Store) error {
				if err := st.Migrate(ctx); err != nil {
					return err
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: schema up to date\n", global.db)
				return err
			})
		},
	})
}
