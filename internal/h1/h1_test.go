package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/internal/rawserve"
)

// scripted is a loopback server that answers each request read on a connection with the next
// of its answers (raw bytes) and closes the connection after an answer that ends in <close>.
// Once its answers are used up it reads without answering until the client closes. It hands
// over every connection it accepted, one at a time, in order.
type scripted struct {
	ln    net.Listener
	conns chan net.Conn // every accepted connection, in order
}

func newScripted(t *testing.T, answers ...string) *scripted {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scripted{ln: ln, conns: make(chan net.Conn, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		next := 0
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns <- c
			br := bufio.NewReader(c)
			for next < len(answers) {
				req, err := http.ReadRequest(br)
				if err != nil {
					break
				}
				io.Copy(io.Discard, req.Body)
				a, closeAfter := strings.CutSuffix(answers[next], "<close>")
				next++
				c.Write([]byte(a))
				if closeAfter {
					break
				}
			}
			if next == len(answers) {
				io.Copy(io.Discard, c)
			}
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return s
}

func (s *scripted) accepted() int { return len(s.conns) }

func newTestH1(t *testing.T) *Transport {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	h := New(&http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}, d)
	t.Cleanup(h.CloseIdleConnections)
	return h
}

// newDialling returns New(next, …) whose own connections come from dial.
func newDialling(next *http.Transport, dial func(context.Context, string, string) (net.Conn, error)) *Transport {
	h := New(next, &net.Dialer{})
	h.dial = dial
	return h
}

// post sends one POST through h and returns the status and the body read to the end.
func post(t *testing.T, ctx context.Context, h *Transport, url string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestH1KeepsAliveAndParsesAnswers(t *testing.T) {
	s := newScripted(t,
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", // a 304 has no body, whatever its length says
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nbus\r\n1\r\ny\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx<close>",
		"HTTP/1.0 200 OK\r\n\r\nuntil close<close>",
		"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n", // final, and ends the connection's HTTP
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	)
	h := newTestH1(t)
	url := "http://" + s.ln.Addr().String() + "/hook"
	for i, want := range []struct {
		status int
		body   string
		conns  int // accepted after the answer
	}{{204, "", 1}, {304, "", 1}, {200, "ok", 1}, {201, "", 1}, {503, "busy", 1}, {200, "x", 1}, {200, "until close", 2}, {202, "", 3},
		{101, "", 3}, {200, "", 4}} {
		status, body, err := post(t, context.Background(), h, url)
		if err != nil || status != want.status || body != want.body || s.accepted() != want.conns {
			t.Fatalf("request %d: %d %q %v on %d connections, want %d %q on %d", i, status, body, err, s.accepted(), want.status, want.body, want.conns)
		}
	}
}

func TestH1DoesNotReuseAConnectionTheServerClosed(t *testing.T) {
	// The first answer looks reusable, but the server closes the connection right after it.
	s := newScripted(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n<close>", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	h := newTestH1(t)
	url := "http://" + s.ln.Addr().String() + "/hook"
	if status, _, err := post(t, context.Background(), h, url); err != nil || status != 200 {
		t.Fatalf("first: %d %v", status, err)
	}
	first := <-s.conns
	// Wait until the server's close has reached the client: its end of the connection reads EOF.
	first.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := first.Read(make([]byte, 1)); err == nil {
		t.Fatal("the server's end of the first connection is still open")
	}
	if status, _, err := post(t, context.Background(), h, url); err != nil || status != 200 {
		t.Fatalf("second, after the server closed the idle connection: %d %v", status, err)
	}
	if n := s.accepted() + 1; n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestH1ClosesAConnectionWhoseBodyWasNotReadToTheEnd(t *testing.T) {
	s := newScripted(t, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	h := newTestH1(t)
	url := "http://" + s.ln.Addr().String() + "/hook"
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
	resp, err := h.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(resp.Body, make([]byte, 4))
	resp.Body.Close()
	if status, _, err := post(t, context.Background(), h, url); err != nil || status != 200 || s.accepted() != 2 {
		t.Fatalf("%d %v on %d connections, want 200 on a second one", status, err, s.accepted())
	}
}

// TestH1RefusesEndlessHeaders: an answer's head is bounded by next.MaxResponseHeaderBytes, or
// by net/http's default of 10 MiB when that is zero; a head just under a set limit is read.
func TestH1RefusesEndlessHeaders(t *testing.T) {
	const chunk = 16 << 10
	for _, c := range []struct {
		limit       int64 // next.MaxResponseHeaderBytes
		headerBytes int   // of the answer's X-Long header
		tooLong     bool
	}{{0, defaultMaxHeaderBytes + 2*chunk, true}, {128 << 10, 100_000, false}, {128 << 10, 128<<10 + 2*chunk, true}} {
		ln := rawserve.Listen(t)
		rawserve.Each(t, ln, func(nc net.Conn) {
			http.ReadRequest(bufio.NewReader(nc))
			nc.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Long: "))
			for left := c.headerBytes; left > 0; left -= chunk {
				if _, err := nc.Write([]byte(strings.Repeat("a", min(left, chunk)))); err != nil {
					return
				}
			}
			nc.Write([]byte("\r\n\r\n"))
		})
		d := &net.Dialer{Timeout: 5 * time.Second}
		h := New(&http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute, MaxResponseHeaderBytes: c.limit}, d)
		status, _, err := post(t, context.Background(), h, "http://"+ln.Addr().String()+"/")
		h.CloseIdleConnections()
		if c.tooLong && !errors.Is(err, ErrHeadersTooLong) {
			t.Fatalf("limit %d, %d header bytes: %d %v, want %v", c.limit, c.headerBytes, status, err, ErrHeadersTooLong)
		}
		if !c.tooLong && (err != nil || status != http.StatusOK) {
			t.Fatalf("limit %d, %d header bytes: %d %v, want 200", c.limit, c.headerBytes, status, err)
		}
	}
}

func TestH1ContextBoundsTheExchange(t *testing.T) {
	s := newScripted(t) // reads requests, never answers
	h := newTestH1(t)
	url := "http://" + s.ln.Addr().String() + "/hook"
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := post(t, ctx, h, url); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: err %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, _, err := post(t, ctx, h, url); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: err %v", err)
	}
}

func TestH1SendsAgainOnANewConnectionWhenNothingWasWritten(t *testing.T) {
	s := newScripted(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
	h := newTestH1(t)
	url := "http://" + s.ln.Addr().String() + "/hook"
	if status, _, err := post(t, context.Background(), h, url); err != nil || status != 200 {
		t.Fatalf("first: %d %v", status, err)
	}
	// The idle connection still reads (it passes the peek) but can no longer write.
	h.mu.Lock()
	for _, conns := range h.idle {
		for _, c := range conns {
			c.nc.(*net.TCPConn).CloseWrite()
		}
	}
	h.mu.Unlock()
	if status, _, err := post(t, context.Background(), h, url); err != nil || status != 201 || s.accepted() != 2 {
		t.Fatalf("second: %d %v on %d connections, want 201 on a new one", status, err, s.accepted())
	}
}

// TestH1ClosesConnectionsIdleTooLong: a connection idle for idleFor is closed (its server reads
// EOF, no sooner than idleFor after its answer: the connection was kept for reuse until then) and
// leaves the pool, with no sweep left scheduled.
func TestH1ClosesConnectionsIdleTooLong(t *testing.T) {
	const idleFor = 50 * time.Millisecond
	ln := rawserve.Listen(t)
	type closing struct {
		err   error         // what the server's read after the answer ended with
		after time.Duration // how long after the answer
	}
	closed := make(chan closing, 1)
	rawserve.Each(t, ln, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			closed <- closing{err: err}
			return
		}
		io.Copy(io.Discard, req.Body)
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
		answered := time.Now()
		c.SetReadDeadline(time.Now().Add(10 * time.Second)) // so that a failing test ends
		_, err = br.ReadByte()                              // blocks until the client sends more or closes
		closed <- closing{err, time.Since(answered)}
	})
	h := newTestH1(t)
	h.idleFor = idleFor
	if status, _, err := post(t, context.Background(), h, "http://"+ln.Addr().String()+"/hook"); err != nil || status != 200 {
		t.Fatalf("%d %v", status, err)
	}
	// The sweep runs on its own timer: the server sees the connection closed, and the pool is
	// empty with no sweep left scheduled.
	select {
	case c := <-closed:
		if c.err != io.EOF {
			t.Fatalf("the server's read after the answer ended with %v, want EOF (the client closed)", c.err)
		}
		if c.after < idleFor {
			t.Fatalf("the connection was closed %s after its answer, before idleFor (%s): it was not kept for reuse", c.after, idleFor)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the idle connection was still open 5s after its answer")
	}
	h.mu.Lock()
	idle, sweep := len(h.idle), h.sweep
	h.mu.Unlock()
	if idle != 0 || sweep != nil {
		t.Fatalf("after the sweep: %d hosts still idle, sweep %v", idle, sweep)
	}
}

// TestH1GetsAnAnswerSentBeforeTheBodyWasRead: a receiver that answers 503 with Retry-After after
// the request's headers and reads no further. A small body still fits the socket's buffers, so
// Transport reads the answer after writing; a large one goes to net/http, which reads the
// answer while it writes (Transport would block on the write until the deadline).
func TestH1GetsAnAnswerSentBeforeTheBodyWasRead(t *testing.T) {
	ln := rawserve.Listen(t)
	release := make(chan struct{})
	rawserve.Each(t, ln, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 30\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
		<-release // neither reads the body nor closes
	})
	t.Cleanup(func() { close(release) }) // before rawserve.Each's wait
	h := newTestH1(t)
	// 16 MiB passes what loopback's socket buffers take while nobody reads (a few MB): a write
	// of it blocks, as a smaller one can over a real network.
	for _, size := range []int{1 << 10, maxBody, 16 << 20} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ln.Addr().String()+"/hook", bytes.NewReader(make([]byte, size)))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := h.RoundTrip(req)
		if err != nil {
			t.Fatalf("%d-byte body: %v, want the 503", size, err)
		}
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "30" {
			t.Fatalf("%d-byte body: %d Retry-After %q, want 503 and 30", size, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
}

// TestH1LeavesUnicodeHostsToNetHTTP: net/http dials a host name's punycode form; Transport
// would dial the Unicode one, which the resolver refuses.
func TestH1LeavesUnicodeHostsToNetHTTP(t *testing.T) {
	dialled := make(chan string, 2)
	dial := func(_ context.Context, _, addr string) (net.Conn, error) {
		dialled <- addr
		return nil, errors.New("no dialling in this test")
	}
	h := newDialling(&http.Transport{DialContext: dial, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}, dial)
	req, err := http.NewRequest(http.MethodPost, "http://bücher.example/hook", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.RoundTrip(req); err == nil {
		t.Fatal("a dial that fails gave an answer")
	}
	if addr := <-dialled; addr != "xn--bcher-kva.example:80" {
		t.Fatalf("dialled %q, want the punycode form", addr)
	}
}

// TestH1KeepsIdleConnectionsForACancelledRequest: a request whose context is already done fails
// with its error before it takes (and would close) a pooled connection.
func TestH1KeepsIdleConnectionsForACancelledRequest(t *testing.T) {
	s := newScripted(t, "HTTP/1.1 204 No Content\r\n\r\n")
	h := newTestH1(t)
	url := "http://" + s.ln.Addr().String() + "/hook"
	if status, _, err := post(t, context.Background(), h, url); err != nil || status != http.StatusNoContent {
		t.Fatalf("first: %d %v", status, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := post(t, ctx, h, url); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err %v, want context.Canceled", err)
	}
	h.mu.Lock()
	idle := len(h.idle[s.ln.Addr().String()])
	h.mu.Unlock()
	if idle != 1 {
		t.Fatalf("%d idle connections after a cancelled request, want the 1 kept", idle)
	}
}

// TestH1DoesNotSendAgainWhatWasWritten: the receiver reads the second request on a reused
// connection, then closes it without answering. The request went out, so it may have been acted
// on: Transport reports the error and does not send it again on a new connection.
func TestH1DoesNotSendAgainWhatWasWritten(t *testing.T) {
	ln := rawserve.Listen(t)
	requests := make(chan struct{}, 4)
	rawserve.Each(t, ln, func(c net.Conn) {
		br := bufio.NewReader(c)
		for n := 0; ; n++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			requests <- struct{}{}
			if n > 0 {
				return // the second request on a connection: closed unanswered
			}
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
		}
	})
	h := newTestH1(t)
	url := "http://" + ln.Addr().String() + "/hook"
	if status, _, err := post(t, context.Background(), h, url); err != nil || status != http.StatusOK {
		t.Fatalf("first: %d %v", status, err)
	}
	if _, _, err := post(t, context.Background(), h, url); err == nil {
		t.Fatal("second: answered, want the connection's error")
	}
	// A resend would be the first request on a new connection, answered 200 above.
	if n := len(requests); n != 2 {
		t.Fatalf("the receiver read %d requests, want 2: the second was sent again", n)
	}
}

// TestH1LeavesLargeAndUnknownBodiesToNetHTTP: a body over maxBody, or of unknown length, goes
// to net/http, which reads an early answer while it writes; a small known one stays.
func TestH1LeavesLargeAndUnknownBodiesToNetHTTP(t *testing.T) {
	dialled := make(chan string, 1)
	dialer := func(name string) func(context.Context, string, string) (net.Conn, error) {
		return func(context.Context, string, string) (net.Conn, error) {
			dialled <- name
			return nil, errors.New("no dialling in this test")
		}
	}
	h := newDialling(&http.Transport{DialContext: dialer("net/http"), MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}, dialer("h1"))
	for _, c := range []struct {
		name string
		body io.Reader
		want string
	}{
		{"1 KiB", bytes.NewReader(make([]byte, 1<<10)), "h1"},
		{"no body", nil, "h1"},
		{"past maxBody", bytes.NewReader(make([]byte, maxBody+1)), "net/http"},
		{"unknown length", io.MultiReader(strings.NewReader("{}")), "net/http"},
	} {
		req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:9/hook", c.body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.RoundTrip(req); err == nil {
			t.Fatalf("%s: a dial that fails gave an answer", c.name)
		}
		if got := <-dialled; got != c.want {
			t.Fatalf("%s: sent by %s, want %s", c.name, got, c.want)
		}
	}
}

// TestH1CancelledWhileWritingGivesNoAnswer: the context is cancelled while the request is being
// written (the receiver has read part of it); an answer that comes after is not returned, and
// the send ends with the cancel at once rather than after the early-answer wait.
func TestH1CancelledWhileWritingGivesNoAnswer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	h := newDialling(&http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute},
		func(context.Context, string, string) (net.Conn, error) { return client, nil })
	go func() {
		io.ReadFull(server, make([]byte, 10)) // part of the request line: the write has begun
		cancel()
		server.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")) // blocks unless the client reads it
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:9/hook", bytes.NewReader(make([]byte, 1<<10)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("answered %d after the cancel", resp.StatusCode)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

// TestH1RefusesALongHeadOfShortHeadersAsTooLong: whatever byte of a header line the limit falls
// on, an answer whose head passes it fails with ErrHeadersTooLong (as the package says), not with
// a parse error of the line the limit cut short ("malformed MIME header: missing colon").
func TestH1RefusesALongHeadOfShortHeadersAsTooLong(t *testing.T) {
	const limit = 128 << 10
	for pad := range 11 { // lines are 11 bytes: the limit falls on each byte of one
		ln := rawserve.Listen(t)
		rawserve.Each(t, ln, func(nc net.Conn) {
			nc.SetDeadline(time.Now().Add(5 * time.Second))
			http.ReadRequest(bufio.NewReader(nc))
			w := bufio.NewWriter(nc)
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Pad: %s\r\n", strings.Repeat("p", pad))
			for i := 0; i < 2*limit/11; i++ {
				fmt.Fprintf(w, "X%05d: y\r\n", i%100000)
			}
			w.WriteString("\r\n")
			w.Flush()
		})
		d := &net.Dialer{Timeout: 5 * time.Second}
		h := New(&http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute, MaxResponseHeaderBytes: limit}, d)
		status, _, err := post(t, t.Context(), h, "http://"+ln.Addr().String()+"/")
		h.CloseIdleConnections()
		if !errors.Is(err, ErrHeadersTooLong) {
			t.Errorf("limit falling %d bytes later: %d %v, want %v", pad, status, err, ErrHeadersTooLong)
		}
	}
}
