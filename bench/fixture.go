package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// eventType is the type of every benchmark event.
const eventType = "video.trending"

// bigCap is the backlog and queue cap of benchmark databases: the caps are a safety net that a
// benchmark filling millions of rows must not hit.
const bigCap = 100_000_000

// patterns are the subscribers' event patterns, in turn: each of them matches eventType, so every
// event fans out to every subscriber, through all three kinds of matching.
var patterns = []string{"*", eventType, "video.*"}

// subscriberSpec describes the subscribers of a benchmark database.
type subscriberSpec struct {
	n    int
	url  func(id string) string
	mode store.Mode
	// rate and burst of the token bucket; 0: the maximum, i.e. rate limits off.
	rate  float64
	burst int
	// inFlight caps each subscriber's deliveries in flight; 0: the default, which is isolation
	// from a stuck subscriber rather than a rate limit.
	inFlight int
}

// subscriberID is the id of the i-th subscriber.
func subscriberID(i int) string { return fmt.Sprintf("sub_%02d", i) }

// inputs are the subscribers to create.
func (s subscriberSpec) inputs() []store.SubscriberInput {
	rate, burst := s.rate, s.burst
	if rate == 0 {
		rate, burst = store.MaxRatePerSec, store.MaxBurst
	}
	out := make([]store.SubscriberInput, s.n)
	for i := range out {
		id := subscriberID(i)
		out[i] = store.SubscriberInput{ID: id, URL: s.url(id), Events: []string{patterns[i%len(patterns)]}, Mode: s.mode,
			RatePerSec: rate, Burst: burst, MaxInFlight: s.inFlight}
	}
	return out
}

// openDB opens (creating) a benchmark database with the benchmark's caps.
func openDB(ctx context.Context, path string) (*store.Store, error) {
	return store.Open(ctx, store.Options{Path: path, BacklogCap: bigCap, GlobalCap: bigCap})
}

// createDB creates a database at path with the subscribers of spec and returns it open.
func createDB(ctx context.Context, path string, spec subscriberSpec) (*store.Store, error) {
	st, err := openDB(ctx, path)
	if err != nil {
		return nil, err
	}
	for _, in := range spec.inputs() {
		if _, err := st.CreateSubscriber(ctx, in); err != nil {
			st.Close()
			return nil, fmt.Errorf("create subscriber %s: %w", in.ID, err)
		}
	}
	return st, nil
}

// eventBody is a JSON object of exactly size bytes (at least its fixed fields', about 50).
func eventBody(size, seq int) []byte {
	head := `{"video_id":"v` + strconv.Itoa(seq) + `","rank":` + strconv.Itoa(seq%100+1) + `,"pad":"`
	pad := max(0, size-len(head)-2)
	return []byte(head + strings.Repeat("x", pad) + `"}`)
}

// fillBatch is the number of events per EmitBatch while filling: under the store's per-batch
// maximum, and large enough that a transaction carries thousands of rows.
const fillBatch = 500

// fillTimeout bounds a fill: a million rows take well under a minute on a quiet machine.
const fillTimeout = 10 * time.Minute

// fill emits events through the store's batch emit (not HTTP), two batches in flight so group
// commit can merge them, with ids prefix-0, prefix-1, ...
func fill(ctx context.Context, st *store.Store, events, bodySize int, prefix string) error {
	ctx, cancel := context.WithTimeout(ctx, fillTimeout)
	defer cancel()
	batches := make(chan int)
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := range batches {
				ins := make([]store.EmitInput, 0, fillBatch)
				for i := first; i < min(first+fillBatch, events); i++ {
					ins = append(ins, store.EmitInput{ID: prefix + "-" + strconv.Itoa(i), Type: eventType, Body: eventBody(bodySize, i)})
				}
				if _, err := st.EmitBatch(ctx, ins); err != nil {
					errs <- fmt.Errorf("fill: events %d to %d: %w", first, first+len(ins)-1, err)
					return
				}
			}
		}()
	}
	var err error
send:
	for first := 0; first < events; first += fillBatch {
		select {
		case batches <- first:
		case err = <-errs:
			break send
		}
	}
	close(batches)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}
