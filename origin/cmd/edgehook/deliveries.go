package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// listFlags are the filters and paging of `deliveries list` and `dead list`.
type listFlags struct {
	status, subscriber, event, from, to, cursor string
	limit                                       int
	json                                        bool
}

func (f *listFlags) register(fs *pflag.FlagSet, withStatus bool) {
	if withStatus {
		fs.StringVar(&f.status, "status", "", "only this status: pending, leased, delivered, dead, superseded or held")
	}
	fs.StringVar(&f.subscriber, "subscriber", "", "only this subscriber id")
	fs.StringVar(&f.event, "event", "", "only this event id")
	fs.StringVar(&f.from, "from", "", "created at or after this RFC 3339 time")
	fs.StringVar(&f.to, "to", "", "created before this RFC 3339 time")
	fs.StringVar(&f.cursor, "cursor", "", "continue after a previous page (its next cursor)")
	fs.IntVar(&f.limit, "limit", 100, fmt.Sprintf("deliveries per page, 1 to %d", store.MaxPageSize))
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a table")
}

func (f *listFlags) filter() (store.DeliveryFilter, error) {
	st, err := api.ParseStatus(f.status)
	if err != nil {
		return store.DeliveryFilter{}, usagef("--status: %v", err)
	}
	from, to, err := parseFlagRange(f.from, f.to)
	if err != nil {
		return store.DeliveryFilter{}, err
	}
	if f.limit < 1 || f.limit > store.MaxPageSize {
		return store.DeliveryFilter{}, usagef("--limit: %d is not from 1 to %d", f.limit, store.MaxPageSize)
	}
	return store.DeliveryFilter{Status: st, SubscriberID: f.subscriber, EventID: f.event, From: from, To: to, Cursor: f.cursor, Limit: f.limit}, nil
}

// parseFlagRange reads --from and --to, the optional bounds of a range [from, to)
// (api.ParseTimeBound, api.CheckTimeRange); an error is a usage error naming the flag at fault,
// both for a range no time is in.
func parseFlagRange(from, to string) (f, t time.Time, err error) {
	if f, err = api.ParseTimeBound(from); err != nil {
		return f, t, usagef("--from: %v", err)
	}
	if t, err = api.ParseTimeBound(to); err != nil {
		return f, t, usagef("--to: %v", err)
	}
	if err = api.CheckTimeRange("--from", "--to", f, t); err != nil {
		return f, t, usageError{err}
	}
	return f, t, nil
}

// listDeliveries prints one page as a table (the next cursor on the last line) or as JSON.
func listDeliveries(cmd *cobra.Command, f *listFlags) error {
	filter, err := f.filter()
	if err != nil {
		return err
	}
	return withStore(cmd, func(ctx context.Context, st *store.Store) error {
		page, err := st.ListDeliveries(ctx, filter)
		if err != nil {
			return flagError(err)
		}
		v := api.NewDeliveryPage(&page)
		if f.json {
			return printJSON(cmd.OutOrStdout(), v)
		}
		return printDeliveries(cmd.OutOrStdout(), v)
	})
}

func printDeliveries(w io.Writer, p api.DeliveryPage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tSUBSCRIBER\tEVENT\tTYPE\tATTEMPTS\tLAST\tCREATED")
	for _, d := range p.Deliveries {
		last := d.LastError
		if d.LastStatus != 0 {
			last = fmt.Sprintf("%d %s", d.LastStatus, d.LastError)
		}
		printRow(tw, d.ID, d.Status, d.SubscriberID, d.EventID, d.EventType, d.Attempts, fmt.Sprintf("%.40s", last),
			d.CreatedAt.Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.NextCursor != "" {
		_, err := fmt.Fprintf(w, "more: --cursor %s\n", p.NextCursor)
		return err
	}
	return nil
}

func init() {
	group := &cobra.Command{Use: "deliveries", Aliases: []string{"delivery"}, Short: "Inspect and retry deliveries (directly on the database file)", Args: cobra.ArbitraryArgs, RunE: runGroup}

	var lf listFlags
	listCmd := &cobra.Command{
		Use:     "list",
		Short:   "List deliveries, newest first, one page at a time",
		Example: `  edgehook deliveries list --subscriber sub_123 --status pending --limit 20`,
		Args:    noArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return listDeliveries(cmd, &lf) },
	}
	lf.register(listCmd.Flags(), true)

	showCmd := idCommand("show ID", "Show one delivery with its attempts", func(ctx context.Context, st *store.Store, id string) (any, error) {
		d, err := st.GetDelivery(ctx, id)
		if err != nil {
			return nil, err
		}
		return api.NewDelivery(d), nil
	})
	retryCmd := idCommand("retry ID", "Queue a dead or held delivery again, due now", func(ctx context.Context, st *store.Store, id string) (any, error) {
		d, err := st.RetryDelivery(ctx, id, st.Now())
		if err != nil {
			return nil, err
		}
		return api.NewDelivery(d), nil
	})
	group.AddCommand(listCmd, showCmd, retryCmd)
	rootCmd.AddCommand(group)
}
