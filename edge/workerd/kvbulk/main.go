// Command kvbulk writes a `wrangler kv bulk put` file holding subscriber records, in the format
// `edgehook edge export-kv` writes (wire.SubscriberEntry, wire.EncodeBulk). The workerd tests use
// it to load KV through the real wrangler from a file made by the Go encoder.
//
//	go run ./edge/workerd/kvbulk -out subscribers.json -id sub_a -url http://127.0.0.1:8080/hook
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/edgehook/edgehook/shared/wire"
)

func main() {
	out := flag.String("out", "", "file to write (required)")
	id := flag.String("id", "", "subscriber id (required)")
	url := flag.String("url", "", "subscriber URL (required)")
	timeoutMS := flag.Int64("timeout-ms", 2000, "subscriber timeout in milliseconds")
	flag.Parse()
	if err := run(*out, *id, *url, *timeoutMS); err != nil {
		fmt.Fprintln(os.Stderr, "kvbulk:", err)
		os.Exit(1)
	}
}

func run(out, id, url string, timeoutMS int64) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	entry, err := wire.SubscriberEntry(id, &wire.SubscriberRecord{URL: url, TimeoutMS: timeoutMS, Active: true})
	if err != nil {
		return fmt.Errorf("-id/-url: %w", err)
	}
	data, err := wire.EncodeBulk([]wire.BulkEntry{entry})
	if err != nil {
		return err
	}
	return os.WriteFile(out, data, 0o644)
}
