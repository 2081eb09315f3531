//go:build unix

package h1

import "syscall"

// canPeek: Transport can tell a live idle connection from one the server closed.
const canPeek = true

// peekIdle reports whether the socket fd has nothing to read and is not closed, without
// blocking and without consuming anything.
func peekIdle(fd uintptr) bool {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err == syscall.EAGAIN
}
