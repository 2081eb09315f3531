package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = ""

// Version returns the binary's version: the one stamped at build time, else the module version.
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  noArgs,
		// Answers whatever the settings hold: it reads none, and it is what an operator runs
		// first when something is wrong.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "edgehook %s (%s, %s/%s)\n", Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	})
}
