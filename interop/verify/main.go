// Command verify checks Standard Webhooks signatures with shared/signature, as a receiver using it
// would: the interop test (interop/standardwebhooks.test.mjs) signs messages with the reference
// library and asks this command whether ours accepts them. It reads a JSON array of messages on
// standard input and writes a JSON array of the same length: "" for a message that verifies
// against the clock now, else the error.
//
//	echo '[{"secrets":["whsec_…"],"id":"msg_1","timestamp":"1700000000","signature":"v1,…","body":"e30="}]' | go run ./interop/verify
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/edgehook/edgehook/shared/signature"
)

type message struct {
	Secrets   []string `json:"secrets"`
	ID        string   `json:"id"`
	Timestamp string   `json:"timestamp"`
	Signature string   `json:"signature"`
	Body      []byte   `json:"body"` // base64 in JSON: the exact bytes signed
}

func main() {
	var msgs []message
	if err := json.NewDecoder(os.Stdin).Decode(&msgs); err != nil {
		fmt.Fprintln(os.Stderr, "verify: standard input:", err)
		os.Exit(1)
	}
	results := make([]string, len(msgs))
	for i, m := range msgs {
		if err := verify(m); err != nil {
			results[i] = err.Error()
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, "verify:", err)
		os.Exit(1)
	}
}

func verify(m message) error {
	secrets := make([]signature.Secret, len(m.Secrets))
	for i, s := range m.Secrets {
		var err error
		if secrets[i], err = signature.ParseSecret(s); err != nil {
			return err
		}
	}
	return signature.Verify(secrets, m.ID, m.Timestamp, m.Signature, m.Body, time.Now(), signature.DefaultTolerance)
}
