package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgehook/edgehook/origin/engine"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// requestTimeout bounds each request of a load, its answer's body included.
const requestTimeout = 30 * time.Second

// doer sends a request and returns its answer: an *http.Client (the API's clients), or an
// engineSender (the ceiling's, which sends as the engine does).
type doer interface {
	Do(req *http.Request) (*http.Response, error)
}

// engineSender hands requests straight to a transport, as the engine hands its deliveries to its
// own (no http.Client: no redirects followed, no per-request copy of the headers for them).
type engineSender struct{ t http.RoundTripper }

// Do sends req through the transport.
func (s engineSender) Do(req *http.Request) (*http.Response, error) { return s.t.RoundTrip(req) }

// newClient returns a keep-alive HTTP client that uses at most conns connections per host.
func newClient(conns int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: conns,
			MaxConnsPerHost:     conns,
			DisableCompression:  true,
			IdleConnTimeout:     time.Minute,
		},
	}
}

// newEngineSender returns a sender through the engine's own direct-mode transport, allowed to
// reach loopback, keeping conns idle connections: the leanest client here (see h1), so a load
// generator running beside the origin takes as little of the machine as it can.
func newEngineSender(conns int) (engineSender, error) {
	t, err := engine.NewDirectTransport([]netip.Prefix{netip.MustParsePrefix(loopbackNetwork)}, conns)
	return engineSender{t}, err
}

// CloseIdleConnections closes the transport's idle connections.
func (s engineSender) CloseIdleConnections() {
	if c, ok := s.t.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// post is one request of a load: the i-th request's URL, body and headers.
type post func(i int) (url string, body []byte, header http.Header)

// load sends up to n requests over conns connections, for at most d, and counts the answers with
// the wanted status. Every loop is bounded by n and d.
type load struct {
	client doer
	conns  int
	n      int
	d      time.Duration
	req    post
	status int // the expected answer
}

// loadResult is what a load did.
type loadResult struct {
	Requests int           `json:"requests"` // answered with the expected status
	Errors   int           `json:"errors"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	FirstErr string        `json:"first_error,omitempty"`
}

// rate is answered requests per second.
func (r loadResult) rate() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// err is the first error, if any request failed.
func (r loadResult) err() error {
	if r.Errors == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d requests failed, the first: %s", r.Errors, r.Errors+r.Requests, r.FirstErr)
}

// run starts no request after n or after d; requests in flight then finish (each is bounded by
// requestTimeout), so every answered request is counted.
func (l load) run(ctx context.Context) loadResult {
	deadline := time.Now().Add(l.d)
	var next, ok, failed atomic.Int64
	var firstErr sync.Once
	var res loadResult
	var wg sync.WaitGroup
	start := time.Now()
	for range l.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				i := int(next.Add(1)) - 1
				if i >= l.n {
					return
				}
				if err := l.do(ctx, i); err != nil {
					failed.Add(1)
					firstErr.Do(func() { res.FirstErr = err.Error() })
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Requests, res.Errors = int(ok.Load()), int(failed.Load())
	return res
}

// do sends the i-th request and checks the answer.
func (l load) do(ctx context.Context, i int) error {
	url, body, header := l.req(i)
	return send(ctx, l.client, url, body, header, l.status)
}

// send posts body to url and reads the whole answer, which must have status want. The request
// and the read of its answer are bounded by requestTimeout.
func send(ctx context.Context, c doer, url string, body []byte, header http.Header, want int) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var msg []byte
	if resp.ContentLength != 0 { // as the engine does: no buffer for an answer without a body
		if msg, err = io.ReadAll(io.LimitReader(resp.Body, 64<<10)); err != nil {
			return err
		}
	}
	if resp.StatusCode != want {
		return fmt.Errorf("status %d, want %d: %.200s", resp.StatusCode, want, msg)
	}
	return nil
}

// paced sends requests at a steady rate for d, over at most conns connections at once, and
// records when each request started. A request that cannot start on time (every connection busy)
// starts late, or not at all past d, and the achieved rate shows it.
type paced struct {
	client doer
	conns  int
	rate   float64
	d      time.Duration
	req    post
	status int
}

// pacedResult is what a paced load did.
type pacedResult struct {
	starts  []time.Time // by request index; zero if the request failed
	answers []time.Time // when each answer came back, by request index
	loadResult
}

// run sends the paced requests and waits for the last answer.
func (p paced) run(ctx context.Context) pacedResult {
	n := int(p.rate * p.d.Seconds())
	res := pacedResult{starts: make([]time.Time, n), answers: make([]time.Time, n)}
	jobs := make(chan int)
	var failed atomic.Int64
	var firstErr sync.Once
	var wg sync.WaitGroup
	for range p.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				url, body, header := p.req(i)
				start := time.Now()
				if err := send(ctx, p.client, url, body, header, p.status); err != nil {
					failed.Add(1)
					firstErr.Do(func() { res.FirstErr = err.Error() })
					continue
				}
				res.starts[i], res.answers[i] = start, time.Now() // each index is written by one goroutine, read after Wait
			}
		}()
	}
	begin := time.Now()
	interval := time.Duration(float64(time.Second) / p.rate)
	// Bounded in count (n) and in time: a request not started within d is not sent, and the
	// achieved rate shows the shortfall.
	for i := 0; i < n && ctx.Err() == nil && time.Since(begin) < p.d; i++ {
		if wait := time.Until(begin.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		select {
		case jobs <- i:
		case <-time.After(time.Until(begin.Add(p.d))):
		}
	}
	close(jobs)
	wg.Wait()
	res.Elapsed = time.Since(begin)
	res.Errors = int(failed.Load())
	for _, s := range res.starts {
		if !s.IsZero() {
			res.Requests++
		}
	}
	return res
}

// ceilingRequest posts a delivery as the engine sends it: the event body with the Standard Webhooks
// headers. The ceiling posts it to the sink with no queue in between.
func ceilingRequest(url string, body []byte) post {
	secret, err := signature.NewSecret()
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return func(i int) (string, []byte, http.Header) {
		id := "ceil-" + strconv.Itoa(i)
		ts := time.Now().Unix()
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		h.Set("User-Agent", "edgehook/bench")
		h.Set(wire.HeaderWebhookID, id)
		h.Set(wire.HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
		h.Set(wire.HeaderWebhookSignature, signature.Sign([]signature.Secret{secret}, id, ts, body))
		return url, body, h
	}
}

// runClient is the `bench client` role: it posts deliveries to the sink from its own process, as
// the origin does and through the engine's own direct-mode transport (engine.NewDirectTransport:
// the ceiling is "the same client code" as the deliveries), and prints a loadResult as JSON. The
// ceiling runs it.
func runClient(args []string) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	url := fs.String("url", "", "where to post")
	conns := fs.Int("conns", 1, "connections")
	n := fs.Int("n", 1000, "requests at most")
	d := fs.Duration("for", 5*time.Second, "time at most")
	warm := fs.Int("warmup", 0, "requests sent first, not counted")
	bodyBytes := fs.Int("body-bytes", 1024, "event body size")
	allowNet := fs.String("allow-network", "", "an internal network the transport may reach, as the origin's --allow-network (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" || *conns < 1 || *n < 1 || *d <= 0 || *warm < 0 {
		return fmt.Errorf("client: -url, -conns ≥ 1, -n ≥ 1, -for > 0 and -warmup ≥ 0 are required")
	}
	var allow []netip.Prefix
	if *allowNet != "" {
		p, err := netip.ParsePrefix(*allowNet)
		if err != nil {
			return fmt.Errorf("client: -allow-network: %w", err)
		}
		allow = append(allow, p)
	}
	// One idle connection kept per sender: conns senders use conns keep-alive connections.
	t, err := engine.NewDirectTransport(allow, *conns)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	c := engineSender{t}
	req := ceilingRequest(*url, eventBody(*bodyBytes, 0))
	ctx := context.Background()
	if *warm > 0 {
		if r := (load{client: c, conns: *conns, n: *warm, d: *d, req: req, status: http.StatusNoContent}).run(ctx); r.err() != nil {
			return fmt.Errorf("warm-up: %w", r.err())
		}
	}
	r := load{client: c, conns: *conns, n: *n, d: *d, req: req, status: http.StatusNoContent}.run(ctx)
	return json.NewEncoder(os.Stdout).Encode(r)
}
