//go:build wasip1 && edgehook_hostmac

package signature

import (
	"crypto/sha256"
	"runtime"
	"unsafe"
)

// With the edgehook_hostmac tag, a wasip1 build (the relay module of the local harness,
// edge/cmd/wasi) asks its host for HMAC-SHA256: Go's SHA-256 compiled to WASM costs ~40–190 µs per
// KB, the host's a few µs. The host function is edge/harness/abi.HMACFunc.
//
//go:wasmimport edgehook hmac_sha256
func hostHMAC(keyPtr, keyLen, iovPtr, iovCount, outPtr uint32)

// mac writes HMAC-SHA256(key, parts...), computed by the host, to dst.
func mac(dst *[sha256.Size]byte, key []byte, parts ...[]byte) {
	// The iovec array has room for every caller's parts (at most five), so it stays on the stack;
	// more parts would spill to the heap through append.
	iov := make([]uint32, 0, 10)
	for _, p := range parts {
		iov = append(iov, addr(p), uint32(len(p)))
	}
	hostHMAC(addr(key), uint32(len(key)), uint32(uintptr(unsafe.Pointer(unsafe.SliceData(iov)))), uint32(len(parts)), addr(dst[:]))
	runtime.KeepAlive(parts)
	runtime.KeepAlive(key)
	runtime.KeepAlive(dst)
}

// addr returns the guest address of b's first byte (0 for an empty slice).
func addr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
