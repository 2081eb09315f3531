//go:build !unix

package h1

// canPeek: without a non-blocking peek Transport could not tell a live idle connection from
// one the server closed, so every request goes to net/http's transport.
const canPeek = false

func peekIdle(uintptr) bool { return false }
