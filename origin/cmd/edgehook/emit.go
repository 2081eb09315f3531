package main

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
	"github.com/spf13/cobra"
)

func init() {
	var in store.EmitInput
	var data, dataFile string
	cmd := &cobra.Command{
		Use:   "emit --type TYPE (--data JSON | --data-file FILE)",
		Short: "Emit one event: store it and queue a delivery for every matching subscriber",
		Long: `Emit writes the event and its deliveries to the database file and returns once they are durable;
a running serve or the next drain sends them. The data is the webhook body, byte for byte.`,
		Example: `  edgehook emit --type video.trending --data '{"video_id":"v42","rank":1}'
  edgehook emit --id evt_1 --type video.rank_updated --data-file payload.json
  some-command | edgehook emit --type report.ready --data-file -`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if in.ID == "" && cmd.Flags().Changed("id") { // `--id "$ID"`, ID unset: each retry would store the event again
				return usagef("--id: must not be empty (leave the flag out to have one generated)")
			}
			body, err := eventData(cmd, data, dataFile)
			if err != nil {
				return err
			}
			in.Body = body
			if in.ID == "" {
				in.ID = api.NewEventID()
			}
			return withStore(cmd, func(ctx context.Context, st *store.Store) error {
				res, err := st.Emit(ctx, in)
				var fe *wire.FieldError
				if errors.As(err, &fe) && fe.Field == "body" && cmd.Flags().Changed("data-file") {
					return usagef("--data-file: %v", fe.Err) // the data came from there, not --data
				}
				if err != nil {
					return flagError(err)
				}
				return printJSON(cmd.OutOrStdout(), api.NewEmitResult(res))
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.ID, "id", "", "event id, the idempotency key (default: generated)")
	f.StringVar(&in.Type, "type", "", "event type, e.g. video.trending (required)")
	f.StringVar(&data, "data", "", "event data: a JSON value")
	f.StringVar(&dataFile, "data-file", "", `file holding the event data ("-" for standard input)`)
	f.StringVar(&in.CoalesceKey, "coalesce-key", "", "coalesce key (default: taken from the payload for coalescing subscribers)")
	rootCmd.AddCommand(cmd)
}

// eventData reads the event body from exactly one of --data and --data-file, at most --body-limit.
func eventData(cmd *cobra.Command, data, file string) ([]byte, error) {
	hasData, hasFile := cmd.Flags().Changed("data"), cmd.Flags().Changed("data-file")
	limit := int(global.bodyLimit)
	switch {
	case hasData && hasFile:
		return nil, usagef("--data and --data-file: give one, not both")
	case hasData && len(data) > limit:
		return nil, usagef("--data: %d bytes, more than --body-limit %s", len(data), global.bodyLimit)
	case hasData:
		return []byte(data), nil
	case !hasFile:
		return nil, usagef("--data: required (or --data-file)")
	}
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), int64(limit)+1)) // what is past the limit is not read
	} else {
		b, err = os.ReadFile(file)
	}
	switch {
	case err != nil:
		return nil, usagef("--data-file: %v", err)
	case file == "-" && len(b) > limit:
		return nil, usagef("--data-file: standard input holds more than --body-limit %s", global.bodyLimit)
	case len(b) > limit:
		return nil, usagef("--data-file: %d bytes, more than --body-limit %s", len(b), global.bodyLimit)
	}
	return b, nil
}
